"""Positive control: does pre-training learn beyond token frequencies? EDMem and its BART twin on the ukwiki excerpt.

    python benchmarks/bench_learning.py                    # corpora, the control (+ the ablation arms), evaluation, report
    python benchmarks/bench_learning.py --arms control     # the control only: EDMem and BART on the labelled corpus
    python benchmarks/bench_learning.py --report           # learning.json -> learning.png and docs/ablation.md only
    python benchmarks/bench_learning.py --grid gpu         # the GPU grid (one H100, <= 10 minutes of training)
    python benchmarks/bench_learning.py --grid gpu --tiny  # its plumbing on CPU, with a tiny model and 2 steps

Results: benchmarks/results/learning.json (grid cpu), benchmarks/results/learning_cpu-lr1e-3.json (its follow-up),
benchmarks/results/learning_gpu.json (grid gpu), each with its .png; docs/ablation.md from them.

Protocol (fixed before the first control run; the figures it produced were not seen when it was written):

Data. The shared ukwiki excerpt (../shared/wikidumps/ukwiki-2023-first100k-lines-truncated.xml.xz, ~530 pages).
The corpus job with ``--keep_red_links true --validation_fraction 0.05`` makes a GPT-2-tokenized
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
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import grid_runs  # noqa: E402
from grid_runs import free_port  # noqa: E402

WIKIDUMPS = Path(os.environ.get("WIKIDUMPS_DIR", REPO / ".." / "shared" / "wikidumps")).resolve()
DUMP = "ukwiki-2023-first100k-lines-truncated.xml.xz"
OUT = REPO / "out" / "learning"
RESULTS = REPO / "benchmarks" / "results"
VOCAB_SIZE = 4096
CORPUS_JOB_ARGS = ("--keep_red_links", "true", "--validation_fraction", "0.05")
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
                          "--train.eval_every", "50", "--train.keep_checkpoints", "0", "--train.report_to", "none",
                          "--train.log_loss_grad_norms", "true")},
    # Follow-up, added after the first control run was seen (not pre-registered): its EDMem runs became unstable at
    # lr 3e-3 (LM gradient spikes, the EL loss collapsing back to its initial value after step 120): the same
    # protocol at lr 1e-3 with 10% warm-up, the control's two arms only.
    "cpu-lr1e-3": {"steps": 400, "threads": 1, "eval_passages": 0, "curve_passages": 128, "save_every": 100,
                   "overrides": None},
    # One H100, the 4 arms in <= 10 minutes (an estimate, not measured: no GPU in this session): ~1.1e13 FLOP a step
    # (6 x 44M non-embedding parameters x 41k tokens per stack), ~0.1 s at 10% MFU, 600 steps ~1 minute per arm
    # plus start-up and evaluation. 600 x 256 sequences are ~13 epochs of the excerpt's train split: the held-out
    # curve (a validation pass every 100 steps, checkpoints every 150) shows where it starts to overfit.
    "gpu": {"steps": 600, "threads": 0, "eval_passages": 0, "curve_passages": 0, "save_every": 150,
            "overrides": ("--model.d_model", "512", "--model.attention_heads", "8", "--model.ffn_dim", "2048",
                          "--model.lower_layers", "2", "--model.upper_layers", "4", "--model.entity_dim", "128",
                          "--model.max_positions", "160", "--model.dropout", "0.1",
                          "--data.max_seq_len", "160", "--data.validation_batches", "4",
                          "--optim.lr", "1e-3", "--optim.warmup_fraction", "0.05", "--optim.grad_clip", "1.0",
                          "--optim.el_weight", "1.0", "--train.global_batch_size", "256",
                          "--train.micro_batch_size", "auto", "--train.log_every", "20",
                          "--train.eval_every", "100", "--train.keep_checkpoints", "0", "--train.report_to", "none",
                          "--train.log_loss_grad_norms", "true")},
}
GRIDS["cpu-lr1e-3"]["overrides"] = (*GRIDS["cpu"]["overrides"], "--optim.lr", "1e-3", "--optim.warmup_fraction", "0.1")
# --tiny: the GPU grid's plumbing on CPU (every stage runs; nothing is learnt)
TINY = ("--model.d_model", "32", "--model.attention_heads", "2", "--model.ffn_dim", "64", "--model.lower_layers", "1",
        "--model.upper_layers", "1", "--model.entity_dim", "16", "--train.global_batch_size", "4",
        "--train.micro_batch_size", "4", "--train.bf16", "false", "--train.eval_every", "1",
        "--data.validation_batches", "1", "--data.num_workers", "0")


def log(msg: str) -> None:
    """A time-stamped progress line, printed and appended to OUT/progress.log."""
    grid_runs.log(msg, OUT)


def train_args(grid: str, corpus_dir: Path, run_dir: Path, model: str, steps: int, tiny: bool = False) -> list[str]:
    """The `wikiedm pretrain` command line of one arm (trainer.pretrain, one rank)."""
    cfg = GRIDS[grid]
    return ["--config", "configs/pretrain/tiny.yaml", "--data.path", str(corpus_dir), "--train.output_dir",
            str(run_dir), "--train.max_steps", str(steps), "--train.seed", str(SEED), "--model.memory", MODELS[model],
            "--train.resume", "none", "--train.save_every", str(cfg["save_every"] if not tiny else 1),
            *cfg["overrides"], *(TINY if tiny else ())]


def machine() -> dict:
    import torch

    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    return {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count(),
            "torch": torch.__version__, "gpu": gpu, "load_avg_at_start": os.getloadavg()}


# ----------------------------------------------------------------------------- corpora


def run_job(args: list[str], what: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", *args], cwd=REPO, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{what} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    log(f"{what}: {time.monotonic() - started:.0f} s")


def cached(out: Path, args: list[str]) -> bool:
    """Whether ``out`` was made with exactly ``args`` (the arguments are kept beside it)."""
    stamp = out.parent / f"{out.name}.args.json"
    return out.exists() and stamp.exists() and json.loads(stamp.read_text()) == args


def stamp(out: Path, args: list[str]) -> None:
    (out.parent / f"{out.name}.args.json").write_text(json.dumps(args))


def build_corpora() -> dict[str, Path]:
    """GPT-2 corpus -> own BPE (train split's text) -> the hyperlinks and labels corpora with that BPE."""
    root = OUT / "corpora"
    root.mkdir(parents=True, exist_ok=True)
    dump = str(WIKIDUMPS / DUMP)
    gpt2 = root / "ukwiki-gpt2-hyperlinks"
    args = ["--input", dump, "--output", str(gpt2), *CORPUS_JOB_ARGS, *CORPORA["hyperlinks"]]
    if not cached(gpt2 / "manifest.json", args):
        run_job(["pipelines.wiki_mentions", *args], "corpus job (GPT-2 tokens)")
        stamp(gpt2 / "manifest.json", args)
    tokenizer = root / f"uk-bpe{VOCAB_SIZE}"
    args = ["train-tokenizer", "--corpus", str(gpt2), "--output", str(tokenizer), "--vocab_size", str(VOCAB_SIZE),
            "--overwrite", "true"]
    if not cached(tokenizer, args):
        run_job(["wikiedm.cli", *args], f"train-tokenizer (vocabulary {VOCAB_SIZE})")
        stamp(tokenizer, args)
    corpora = {}
    for name, extra in CORPORA.items():
        out = root / f"ukwiki-bpe{VOCAB_SIZE}-{name}"
        args = ["--input", dump, "--output", str(out), *CORPUS_JOB_ARGS, "--tokenizer", str(tokenizer), *extra]
        if not cached(out / "manifest.json", args):
            run_job(["pipelines.wiki_mentions", *args], f"corpus job ({name}, own tokenizer)")
            stamp(out / "manifest.json", args)
        corpora[name] = out
    return corpora


def corpus_facts(root: Path) -> dict:
    import pyarrow.parquet as pq

    facts = {}
    for split in ("train", "validation"):
        passages, tokens, sources = 0, 0, {}
        for path in sorted((root / "passages").glob(f"{split}-*.parquet")):
            t = pq.read_table(path, columns=["token_ids", "mentions"])
            passages += t.num_rows
            tokens += len(t.column("token_ids").combine_chunks().flatten())
            for mentions in t.column("mentions").to_pylist():
                for m in mentions:
                    sources[m["source"]] = sources.get(m["source"], 0) + 1
        facts[split] = {"passages": passages, "tokens": tokens, "mentions": sum(sources.values()),
                        "hyperlinks": sources.get("hyperlink", 0)}
    facts["entities"] = pq.read_metadata(root / "entity_vocab" / "entity_vocab.parquet").num_rows
    return facts


# ----------------------------------------------------------------------------- runs


def run_dir_of(grid: str, corpus: str, model: str, tiny: bool) -> Path:
    return OUT / "runs" / (f"{grid}-tiny" if tiny else grid) / f"{corpus}-{model}"


def train(grid: str, corpora: dict, corpus: str, model: str, steps: int, tiny: bool) -> dict:
    """One arm's training (or the finished run already there, made with the same arguments)."""
    cfg = GRIDS[grid]
    run_dir = run_dir_of(grid, corpus, model, tiny)
    args = train_args(grid, corpora[corpus], run_dir, model, steps, tiny)
    done = run_dir / "train_done.json"
    if done.exists() and json.loads((run_dir / "train_args.json").read_text()) == args:
        return json.loads(done.read_text())
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    (run_dir / "train_args.json").write_text(json.dumps(args))
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "MASTER_PORT": str(free_port()), "PYTHONPATH": str(REPO)}
    if cfg["threads"]:
        env.update(OMP_NUM_THREADS=str(cfg["threads"]), MKL_NUM_THREADS=str(cfg["threads"]))
    log(f"train {corpus}-{model}: {steps} steps")
    started = time.monotonic()
    with open(run_dir / "train.log", "w") as out:
        proc = subprocess.run([sys.executable, "-m", "trainer.pretrain", *args], cwd=REPO, env=env, stdout=out,
                              stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        raise RuntimeError(f"training failed ({proc.returncode}): {run_dir / 'train.log'}")
    record = {"wall_s": round(time.monotonic() - started, 1)}
    done.write_text(json.dumps(record))
    log(f"train {corpus}-{model}: done in {record['wall_s']:.0f} s")
    return record


def checkpoints(run_dir: Path) -> list[Path]:
    return sorted((run_dir / "checkpoints").glob("step_*"))


def evaluate_arm(grid: str, corpora: dict, corpus: str, model: str, tiny: bool) -> dict:
    """The final checkpoint on every validation passage (with its records, for paired comparisons), the
    earlier checkpoints on a fixed subset (the held-out learning curve)."""
    import numpy as np
    import torch

    from trainer.evaluate import evaluate, load_checkpoint
    from trainer.metrics import read_metrics

    cfg = GRIDS[grid]
    run_dir = run_dir_of(grid, corpus, model, tiny)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    cached_eval = run_dir / "eval.json"
    tags = checkpoints(run_dir)
    if cached_eval.exists() and (run_dir / "eval_records.npz").exists():
        result = json.loads(cached_eval.read_text())
        records = dict(np.load(run_dir / "eval_records.npz"))
    else:
        started = time.monotonic()
        net, run_config = load_checkpoint(tags[-1])
        metrics, rec = evaluate(net.to(device), corpora["hyperlinks"], run_config["data"]["path"], 32,
                                run_config["data"]["max_seq_len"], cfg["eval_passages"], return_records=True)
        records = {f"m_{k}": v for k, v in rec["mentions"].items()} | {f"p_{k}": v for k, v in rec["passages"].items()}
        np.savez(run_dir / "eval_records.npz", **records)
        curve = []
        for tag in tags[:-1]:  # held-out curve: the same fixed subset of passages at every checkpoint
            early, _ = load_checkpoint(tag)
            m = evaluate(early.to(device), corpora["hyperlinks"], run_config["data"]["path"], 32,
                         run_config["data"]["max_seq_len"], cfg["curve_passages"])
            curve.append({"step": int(tag.name.split("_")[1]), **{k: m[k] for k in CURVE_KEYS}})
        final_subset = evaluate(net, corpora["hyperlinks"], run_config["data"]["path"], 32,
                                run_config["data"]["max_seq_len"], cfg["curve_passages"]) if tags[:-1] else metrics
        curve.append({"step": int(tags[-1].name.split("_")[1]), **{k: final_subset[k] for k in CURVE_KEYS}})
        result = {"metrics": metrics, "heldout_curve": curve, "eval_s": round(time.monotonic() - started, 1)}
        cached_eval.write_text(json.dumps(result, indent=2) + "\n")
    rows = read_metrics(run_dir / "metrics.jsonl")
    result["train_curve"] = [{k: r.get(k) for k in ("step", "split", "lm_loss", "el_loss", "el_acc", "grad_norm",
                                                       "lm_grad_norm", "el_grad_norm", "clip_factor")} for r in rows]
    result["checkpoint"] = str(tags[-1].relative_to(REPO))
    return result, records


CURVE_KEYS = ("other_lm_loss", "mention_lm_loss", "mention_first_token_acc", "el_acc", "el_acc_frequent")


# ----------------------------------------------------------------------------- results


def headline(metrics: dict) -> dict:
    """The figures a check reads, for one model (learning.json's ``edmem`` / ``bart``)."""
    iv = metrics["intervals"]
    return {
        "other_lm_loss": metrics["other_lm_loss"], "other_lm_loss_ci": iv["other_lm_loss"]["ci"],
        "other_minus_unigram": iv["other_lm_loss"]["diff"], "other_minus_unigram_ci": iv["other_lm_loss"]["diff_ci"],
        "other_token_acc": metrics["other_token_acc"],
        "mention_lm_loss": metrics["mention_lm_loss"], "mention_minus_unigram": iv["mention_lm_loss"]["diff"],
        "mention_minus_unigram_ci": iv["mention_lm_loss"]["diff_ci"],
        "mention_token_acc": metrics["mention_token_acc"],
        "mention_first_token_acc": metrics["mention_first_token_acc"],
        "mention_first_token_acc_ci": iv["mention_first_token_acc"]["ci"],
        "other_special_mass": metrics["other_special_mass"], "mention_special_mass": metrics["mention_special_mass"],
        "el_acc": metrics["el_acc"], "el_acc_frequent": metrics["el_acc_frequent"],
        "el_acc_frequent_ci": metrics["el_acc_frequent_ci"],
        "el_frequent_minus_most_frequent": iv.get("el_acc_frequent", {}).get("diff"),
        "el_frequent_minus_most_frequent_ci": iv.get("el_acc_frequent", {}).get("diff_ci"),
        "el_acc_by_band": {b: v["el_acc"] for b, v in metrics["el_acc_by_band"].items()},
    }


def pass_criteria(results: dict) -> dict:
    """Issue 30's two criteria for the control's EDMem, from learning.json's own keys."""
    from trainer.eval_stats import CONTROL_LOSS_MARGIN_NATS

    edmem, base = results["edmem"], results["baselines"]
    loss_ok = edmem["other_lm_loss"] <= base["unigram_other_loss"] - CONTROL_LOSS_MARGIN_NATS
    ci, diff_ci = edmem.get("el_acc_frequent_ci"), edmem.get("el_frequent_minus_most_frequent_ci")
    el_ok = (edmem["el_acc_frequent"] is not None and edmem["el_acc_frequent"] > base["el_most_frequent_frequent"]
             and diff_ci is not None and diff_ci[0] > 0 and ci is not None)
    return {"other_loss_below_unigram_by_0.5": bool(loss_ok), "el_frequent_above_most_frequent": bool(el_ok),
            "passed": bool(loss_ok and el_ok)}


def paired(records: dict, a: str, b: str) -> dict:
    """a - b on the same units (passages / mentions), with paired bootstrap intervals and the verdict against the
    declared minimum effect."""
    from trainer.eval_stats import MIN_EFFECT, bootstrap_ratio, supported

    ra, rb = records[a], records[b]
    for key in ("p_tokens", "m_tokens", "m_known"):
        if not (ra[key] == rb[key]).all():
            raise SystemExit(f"{a} and {b} were scored on different units ({key})")
    has = (ra["m_tokens"] > 0).astype(float)
    out = {
        "other_lm_loss": bootstrap_ratio(ra["p_nll"], ra["p_tokens"], rb["p_nll"]),
        "mention_lm_loss": bootstrap_ratio(ra["m_nll"], ra["m_tokens"], rb["m_nll"]),
        "mention_first_token_acc": bootstrap_ratio(ra["m_first_correct"] * has, has, rb["m_first_correct"] * has),
    }
    for name, r in out.items():
        r["supported"] = supported(r["diff"], r["diff_ci"], MIN_EFFECT["accuracy" if "acc" in name else "lm_loss_nats"])
    return out


def assemble(grid: str, arms: list, corpora: dict, evals: dict, records: dict, trains: dict, steps: int,
             tiny: bool) -> dict:
    control_edmem, control_bart = evals[("labels", "edmem")], evals[("labels", "bart")]
    baselines = control_edmem["metrics"]["baselines"]
    results = {
        "grid": grid + ("-tiny" if tiny else ""), "steps": steps, "seed": SEED,
        "train_args": {f"{c}-{m}": json.loads((run_dir_of(grid, c, m, tiny) / "train_args.json").read_text())
                       for c, m in arms},
        "corpora": {name: corpus_facts(path) for name, path in corpora.items()},
        "vocab_size": VOCAB_SIZE,
        "baselines": baselines,
        "edmem": headline(control_edmem["metrics"]),
        "bart": headline(control_bart["metrics"]),
        "wall_s_per_run": {f"{c}-{m}": trains[(c, m)]["wall_s"] for c, m in arms},
        "eval_s_per_run": {f"{c}-{m}": evals[(c, m)].get("eval_s") for c, m in arms},
        "machine": {**machine(), "load_avg_at_end": os.getloadavg()},
        "arms": {f"{c}-{m}": {"metrics": evals[(c, m)]["metrics"], "heldout_curve": evals[(c, m)]["heldout_curve"],
                              "train_curve": evals[(c, m)]["train_curve"], "checkpoint": evals[(c, m)]["checkpoint"]}
                 for c, m in arms},
        "comparisons": {"memory (labels): edmem - bart": paired(records, ("labels", "edmem"), ("labels", "bart"))},
    }
    if ("hyperlinks", "edmem") in records:
        results["comparisons"].update({
            "memory (hyperlinks): edmem - bart": paired(records, ("hyperlinks", "edmem"), ("hyperlinks", "bart")),
            "labels (edmem): labels - hyperlinks": paired(records, ("labels", "edmem"), ("hyperlinks", "edmem")),
            "labels (bart): labels - hyperlinks": paired(records, ("labels", "bart"), ("hyperlinks", "bart")),
        })
    results["pass"] = pass_criteria(results)
    return results


def result_paths(grid: str, tiny: bool) -> tuple[Path, Path]:
    stem = "learning" if grid == "cpu" else f"learning_{grid}"
    root = OUT / "tiny" if tiny else RESULTS
    return root / f"{stem}.json", root / f"{stem}.png"


def write_plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    base = results["baselines"]
    for i, (name, arm) in enumerate(results["arms"].items()):
        color = f"C{i}"  # one color per arm in every panel
        train = [r for r in arm["train_curve"] if r["split"] == "train"]
        axes[0].plot([r["step"] for r in train], [r["lm_loss"] for r in train], color=color, label=name)
        curve = arm["heldout_curve"]
        axes[1].plot([r["step"] for r in curve], [r["other_lm_loss"] for r in curve], "o-", color=color,
                     label=f"{name} other")
        axes[1].plot([r["step"] for r in curve], [r["mention_lm_loss"] for r in curve], "s--", color=color,
                     label=f"{name} mention")
        if arm["metrics"]["el_acc"] is not None:
            axes[2].plot([r["step"] for r in curve], [r["el_acc_frequent"] for r in curve], "o-", color=color,
                         label=f"{name}")
    for ax, key, label in ((axes[1], "unigram_other_loss", "unigram floor, other"),
                           (axes[1], "unigram_mention_loss", "unigram floor, mention"),
                           (axes[2], "el_most_frequent_frequent", "most frequent entity, >= 20 links")):
        ax.axhline(base[key], color="grey", linestyle=":", label=label)
    axes[0].set_title("training LM loss (all targets, training masking)")
    axes[1].set_title("held-out word loss (nats; curve passages)")
    axes[2].set_title("held-out EL acc@1, targets linked >= 20 times")
    for ax in axes:
        ax.set_xlabel("step")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _f(x, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _ci(ci, digits: int = 3) -> str:
    return "n/a" if not ci else f"[{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"


FOLLOW_UPS = {"cpu-lr1e-3": "the control's two arms at lr 1e-3 with 10% warm-up (added after the first run was "
                             "seen, because its EDMem runs became unstable at lr 3e-3; not pre-registered)"}


def doc_sections() -> list[str]:
    """docs/ablation.md's positive-control sections: the pre-registered run, then each follow-up on record."""
    lines = []
    for grid in ("cpu", *FOLLOW_UPS):
        path = result_paths(grid, False)[0]
        if path.exists():
            lines += doc_lines(json.loads(path.read_text()))
    return lines


def doc_lines(results: dict) -> list[str]:
    """One "Positive control" section of docs/ablation.md (bench_ablation.write_doc puts them first)."""
    base, e, b, ok = results["baselines"], results["edmem"], results["bart"], results["pass"]
    c = results["corpora"]["labels"]
    grid = results["grid"]
    path, png = (p.relative_to(REPO) for p in result_paths(grid, False))
    if grid == "cpu":
        lines = [
            "## Positive control: does pre-training learn beyond token frequencies?",
            "",
            f"Generated by `python benchmarks/bench_learning.py --grid {grid}` from `{path}`; learning curves in "
            f"`{png}`",
            "(training loss at every logged step; held-out figures at each checkpoint on a fixed subset of the "
            "validation passages, 128 in grid `cpu`).",
            "The protocol (data, model, budget, evaluation, pass criteria and the minimum effects) is that script's",
            "docstring, written before the first run.",
            "",
            f"- data: the ukwiki excerpt, own byte-level BPE of {results['vocab_size']} ids (`wikiedm "
            f"train-tokenizer`); labelled corpus: {c['train']['passages']:,} train passages ({c['train']['tokens']:,} "
            f"tokens, {c['train']['hyperlinks']:,} hyperlinks, {c['train']['mentions']:,} mentions with the labels),"
            f" {c['validation']['passages']:,} validation passages, {c['entities']:,} entities;",
        ]
    else:  # a follow-up: what differs from the control above, then its own figures
        lines = [
            f"## Positive control, follow-up `{grid}`: {FOLLOW_UPS.get(grid, grid)}",
            "",
            f"`python benchmarks/bench_learning.py --grid {grid} --arms control` wrote `{path}` and `{png}`; the "
            "data, model, evaluation and pass criteria are the control's (above), only the learning rate and "
            "warm-up differ;",
        ]
    lines += [
        f"- budget: {results['steps']} steps of 16 passages, one seed, CPU; wall time per run "
        + ", ".join(f"{k} {v / 60:.0f} min" for k, v in results["wall_s_per_run"].items())
        + f" (machine: {results['machine']['cpus']} cores shared with other work, load average "
        f"{results['machine']['load_avg_at_start'][0]:.1f} at start);",
        f"- evaluation: all {results['arms']['labels-edmem']['metrics']['passages']} validation passages, "
        f"{results['arms']['labels-edmem']['metrics']['el_targets']:,} linking targets; word metrics (special ids out "
        "of the softmax and the argmax); 95% bootstrap intervals.",
        "",
        "| | unigram floor / baseline | EDMem | BART |",
        "|---|---:|---:|---:|",
        f"| other-token loss (nats) | {_f(base['unigram_other_loss'])} | {_f(e['other_lm_loss'])} "
        f"{_ci(e['other_lm_loss_ci'])} | {_f(b['other_lm_loss'])} {_ci(b['other_lm_loss_ci'])} |",
        f"| other - unigram (nats) | | {_f(e['other_minus_unigram'])} {_ci(e['other_minus_unigram_ci'])} | "
        f"{_f(b['other_minus_unigram'])} {_ci(b['other_minus_unigram_ci'])} |",
        f"| other-token acc | {_f(base['constant_other_token_acc'])} (constant) | {_f(e['other_token_acc'])} | "
        f"{_f(b['other_token_acc'])} |",
        f"| mention-token loss (nats) | {_f(base['unigram_mention_loss'])} | {_f(e['mention_lm_loss'])} | "
        f"{_f(b['mention_lm_loss'])} |",
        f"| mention first-token acc | {_f(base['constant_first_token_acc'])} (constant) | "
        f"{_f(e['mention_first_token_acc'])} {_ci(e['mention_first_token_acc_ci'])} | "
        f"{_f(b['mention_first_token_acc'])} {_ci(b['mention_first_token_acc_ci'])} |",
        f"| EL acc@1, all targets | {_f(base['el_most_frequent'])} (most frequent), {_f(base['el_alias_prior'])} "
        f"(alias prior, mention visible) | {_f(e['el_acc'])} | – |",
        f"| EL acc@1, targets linked >= 20 times | {_f(base['el_most_frequent_frequent'])} (most frequent) | "
        f"{_f(e['el_acc_frequent'])} {_ci(e['el_acc_frequent_ci'])} | – |",
        f"| EL - most frequent, >= 20 | | {_f(e['el_frequent_minus_most_frequent'])} "
        f"{_ci(e['el_frequent_minus_most_frequent_ci'])} | – |",
        "",
    ]
    bands = results["arms"]["labels-edmem"]["metrics"]["el_acc_by_band"]
    if grid == "cpu":
        lines += ["EL acc@1 of EDMem by the target's training link count (targets; EDMem / most frequent / alias prior):",
                  "", "| band | targets | EDMem | most frequent | alias prior (visible) |", "|---|---:|---:|---:|---:|"]
        lines += [f"| {band} | {v['targets']} | {_f(v['el_acc'])} | {_f(v['most_frequent'])} | {_f(v['alias_prior'])} |"
                  for band, v in bands.items()]
    else:  # the bands' targets and baselines are the control's: EDMem's accuracy per band on one line
        lines.append("EL acc@1 of EDMem by the target's training link count (the control's bands and baselines): "
                     + "; ".join(f"{band}: {_f(v['el_acc'])}" for band, v in bands.items()) + ".")
    lines += ["", f"Pass criteria: other-token loss >= 0.5 nats below the unigram floor: "
              f"**{'yes' if ok['other_loss_below_unigram_by_0.5'] else 'no'}**; EL acc@1 on frequent targets above "
              f"the most-frequent baseline, interval excluding it: "
              f"**{'yes' if ok['el_frequent_above_most_frequent'] else 'no'}**. "
              f"The control {'passes' if ok['passed'] else 'fails'}.", "",
              "Paired differences on the same units (bootstrap 95%; supported = interval excludes 0 and the size is "
              "at least the declared minimum, 0.05 nats / 0.02):", "",
              "| comparison | other loss | mention loss | mention first-token acc |", "|---|---:|---:|---:|"]
    for name, comp in results["comparisons"].items():
        cells = [f"{_f(comp[k]['diff'])} {_ci(comp[k]['diff_ci'])}{' (supported)' if comp[k]['supported'] else ''}"
                 for k in ("other_lm_loss", "mention_lm_loss", "mention_first_token_acc")]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    grads = [r for r in results["arms"]["labels-edmem"]["train_curve"] if r.get("el_grad_norm") is not None]
    if grads:
        first, last = grads[0], grads[-1]
        lines += ["", f"Gradient norms of the two terms (one micro-batch, before clipping at 1.0; EDMem, labels): "
                  f"step {first['step']}: LM {first['lm_grad_norm']:.2f}, EL {first['el_grad_norm']:.2f}; step "
                  f"{last['step']}: LM {last['lm_grad_norm']:.2f}, EL {last['el_grad_norm']:.2f} "
                  f"(clip factor {_f(last.get('clip_factor'), 2)})."]
    lines += ["", "Training dynamics (from each run's metrics.jsonl, training masking; medians over the logged steps):", "",
              "| arm | train LM loss, steps 30-50 | train LM loss, last 50 steps | best train EL acc@1 (step) | "
              "final train EL acc@1 | median LM / EL grad norm | median clip factor |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    for name, arm in results["arms"].items():
        d = dynamics(arm["train_curve"], results["steps"])
        lines.append(f"| {name} | {_f(d['lm_early'])} | {_f(d['lm_late'])} | "
                     + (f"{_f(d['el_best'])} ({d['el_best_step']}) | {_f(d['el_final'])}" if d["el_best"] is not None
                        else "– | –")
                     + f" | {_f(d['lm_grad'], 2)} / {_f(d['el_grad'], 2)} | {_f(d['clip'], 2)} |")
    edmem_arms = [n for n, a in results["arms"].items() if a["metrics"]["el_acc"] is not None]
    lines += ["", "The pass criteria applied to every EDMem arm:", "",
              "| arm | other loss - unigram (nats) | EL acc@1, >= 20 links | - most frequent | loss criterion | "
              "EL criterion |", "|---|---:|---:|---:|---|---|"]
    for name in edmem_arms:
        m = results["arms"][name]["metrics"]
        v, iv = arm_criteria(m), m["intervals"]
        lines.append(f"| {name} | {_f(iv['other_lm_loss']['diff'])} {_ci(iv['other_lm_loss']['diff_ci'])} | "
                     f"{_f(m['el_acc_frequent'])} {_ci(m['el_acc_frequent_ci'])} | {_f(iv['el_acc_frequent']['diff'])} "
                     f"{_ci(iv['el_acc_frequent']['diff_ci'])} | {'met' if v['other_loss_below_unigram_by_0.5'] else 'not met'} | "
                     f"{'met' if v['el_frequent_above_most_frequent'] else 'not met'} |")
    reading = READINGS.get(grid)
    if reading:
        lines += ["", "Reading (written after the figures above were seen):", "", *reading(results)]
    return lines + [""]


def dynamics(curve: list[dict], steps: int) -> dict:
    """Summary figures of one run's training curve: the unigram plateau, the EL accuracy's peak, the gradients."""
    import statistics

    train = [r for r in curve if r["split"] == "train"]
    med = lambda xs: statistics.median(xs) if xs else None  # noqa: E731
    el = [(r["el_acc"], r["step"]) for r in train if r.get("el_grad_norm") is not None]
    best = max(el) if el else (None, None)
    return {"lm_early": med([r["lm_loss"] for r in train if 30 <= r["step"] <= 50]),
            "lm_late": med([r["lm_loss"] for r in train if r["step"] > steps - 50]),
            "el_best": best[0], "el_best_step": best[1], "el_final": el[-1][0] if el else None,
            "lm_grad": med([r["lm_grad_norm"] for r in train if r.get("lm_grad_norm") is not None]),
            "el_grad": med([r["el_grad_norm"] for r in train if r.get("el_grad_norm") is not None]),
            "clip": med([r["clip_factor"] for r in train if r.get("clip_factor") is not None])}


def arm_criteria(metrics: dict) -> dict:
    """The control's pass criteria applied to any EDMem arm's metrics."""
    iv = metrics["intervals"]
    return pass_criteria({"baselines": metrics["baselines"], "edmem": {
        "other_lm_loss": metrics["other_lm_loss"], "el_acc_frequent": metrics["el_acc_frequent"],
        "el_acc_frequent_ci": metrics["el_acc_frequent_ci"],
        "el_frequent_minus_most_frequent_ci": iv["el_acc_frequent"]["diff_ci"]}})


def reading_cpu(results: dict) -> list[str]:
    """What the ``cpu`` grid's figures mean (written after they were seen; the figures come from the results)."""
    arms, base = results["arms"], results["baselines"]
    if "hyperlinks-edmem" not in arms:
        return []
    hyp, lab = arms["hyperlinks-edmem"]["metrics"], arms["labels-edmem"]["metrics"]
    hyp_ok, lab_ok = arm_criteria(hyp), arm_criteria(lab)
    dyn = {name: dynamics(arm["train_curve"], results["steps"]) for name, arm in arms.items()}
    stuck = [name for name, d in dyn.items() if d["lm_late"] is not None and d["lm_late"] > d["lm_early"] - 0.3]
    hyp_el = [r for r in arms["hyperlinks-edmem"]["train_curve"] if r["split"] == "train"]
    peak = max(hyp_el, key=lambda r: r["el_acc"])
    after = [r for r in hyp_el if r["step"] > peak["step"]]
    lines = [
        f"- **The pre-registered control fails; the same model on the hyperlinks-only corpus passes.** EDMem on the "
        f"labelled corpus: other-token loss {lab['other_lm_loss']:.2f} nats, "
        f"{base['unigram_other_loss'] - lab['other_lm_loss']:.2f} below the unigram floor (0.5 required); EL acc@1 on "
        f"frequent targets {lab['el_acc_frequent']:.3f} against {base['el_most_frequent_frequent']:.3f}. EDMem on the "
        f"hyperlinks-only corpus, with the same geometry, budget, seed and evaluation: other-token loss "
        f"{hyp['other_lm_loss']:.2f} nats ({base['unigram_other_loss'] - hyp['other_lm_loss']:.2f} below the floor), "
        f"EL acc@1 on frequent targets {hyp['el_acc_frequent']:.3f} {_ci(hyp['el_acc_frequent_ci'])}, "
        f"{hyp['intervals']['el_acc_frequent']['diff']:+.3f} {_ci(hyp['intervals']['el_acc_frequent']['diff_ci'])} "
        f"against the most frequent entity: both criteria "
        f"{'met' if hyp_ok['passed'] else 'not met'} (labelled arm: {'met' if lab_ok['passed'] else 'not met'}).",
        "- **Not a wiring bug**: the code path that fails in the control learns beyond token frequencies in the other "
        "arm (word loss far below the floor on tokens it sees, entity linking above the prior on frequent targets, "
        "on held-out pages).",
        f"- **Scale (optimisation), not data.** {len(stuck)} of the {len(arms)} runs ({', '.join(stuck)}) never left "
        "the unigram plateau: their training LM loss at the end is within 0.3 nats of its value at steps 30-50 "
        "(table above), and their held-out losses sit at or just below the floor (the two BART runs' figures are "
        "the unigram distribution itself, whichever corpus they were trained on). The run that left it did so around steps 90-120 "
        "of its curve. At 400 steps of 16 passages (about half an epoch) leaving the plateau is a matter of chance, so "
        "at this budget a one-seed comparison of two arms measures which run left it, not what the memory or the "
        "labels do: the large 'supported' differences in the table above (memory on the hyperlinks corpus, labels for "
        "EDMem) are that, and are not read as effects. The data supports learning: the alias prior reaches "
        f"{arms['labels-edmem']['metrics']['el_acc_by_band']['>=20']['alias_prior']:.2f} on frequent targets when the "
        "mention is visible, and the hyperlinks arm learnt from the same pages.",
        f"- **Instability at lr 3e-3.** The hyperlinks EDMem's training EL acc@1 peaked at {peak['el_acc']:.3f} "
        f"(step {peak['step']}) and fell to {after[-1]['el_acc'] if after else peak['el_acc']:.3f} by the end, with "
        "LM-gradient spikes in the same runs; its held-out EL accuracy is what survived that. A follow-up at lr 1e-3 "
        "with 10% warm-up (`--grid cpu-lr1e-3 --arms control`) is prepared; it was started and stopped for lack of "
        "machine time (beside the grid's runs and other work on the two shared cores it would not have finished in "
        "the session), so it has no results.",
        f"- **The EL term's gradient.** With the EL term the mean of the three reads, its gradient norm is still "
        f"larger than the LM's (median {dyn['labels-edmem']['el_grad']:.2f} against {dyn['labels-edmem']['lm_grad']:.2f} "
        f"in the labelled EDMem run) and clipping at 1.0 scaled the median step by {dyn['labels-edmem']['clip']:.2f}. "
        "AdamW largely undoes a common scale of the whole gradient, so clipping by itself does not starve the LM. "
        "The norms are over all parameters, the entity table and the query projections included; how the two terms "
        "split over the shared transformer layers, and whether the EL term delays the LM's exit from the plateau, "
        "is not measured here (it would take seeds at lambda 0.3 and 1).",
        "- **What it takes next:** several seeds and more steps per arm (the plateau), i.e. the GPU grid "
        "(`python benchmarks/bench_learning.py --grid gpu`: d_model 512, 2 + 4 layers, entity_dim 128, batch 256, "
        "600 steps per arm, sized to ~10 minutes for the four arms on one H100 by estimate; its plumbing was run end to "
        "end on CPU with `--tiny`). It has not been run: no GPU in this session.",
    ]
    return lines


# What the figures of a grid mean, written after they were seen (docs/ablation.md prints it under the figures).
READINGS = {"cpu": reading_cpu}


def _one_thread() -> None:
    import torch

    torch.set_num_threads(1)


def write_doc() -> None:
    """docs/ablation.md, through bench_ablation (the positive control's section comes first)."""
    import bench_ablation

    main_results = bench_ablation.output_paths("small")[0]
    if main_results.exists():
        bench_ablation.write_doc(json.loads(main_results.read_text()))


def save(results: dict, tiny: bool) -> Path:
    path, png = result_paths(results["grid"].removesuffix("-tiny"), tiny)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")
    write_plot(results, png)
    if not tiny:
        write_doc()
    return path


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arms", choices=sorted(ARMS), default="ablation", help="control: EDMem and BART on the labelled "
                    "corpus; ablation: also both on the hyperlinks-only corpus")
    ap.add_argument("--grid", choices=sorted(GRIDS), default="cpu", help="cpu: the control's budget on this machine; "
                    "gpu: d_model 512, 2+4 layers, entity_dim 128, batch 256 on one GPU")
    ap.add_argument("--steps", type=int, default=0, help="override the grid's steps (0: the protocol's)")
    ap.add_argument("--tiny", action="store_true", help="a tiny model, 2 steps, 16 passages evaluated: the plumbing "
                    "only (results under out/learning/tiny, not in benchmarks/results)")
    ap.add_argument("--report", action="store_true", help="only redraw the plot and docs/ablation.md from the JSON")
    args = ap.parse_args(argv)
    if args.report:
        path, png = result_paths(args.grid, False)
        write_plot(json.loads(path.read_text()), png)
        write_doc()
        return
    cfg = GRIDS[args.grid]
    steps = 2 if args.tiny else (args.steps or cfg["steps"])
    if args.tiny:
        GRIDS[args.grid] = cfg = {**cfg, "eval_passages": 16, "curve_passages": 16}
    arms = list(ARMS[args.arms])
    corpora = build_corpora()
    facts = {name: corpus_facts(path) for name, path in corpora.items()}
    if facts["hyperlinks"]["validation"] != {**facts["labels"]["validation"], "mentions": facts["hyperlinks"][
            "validation"]["mentions"]} or facts["hyperlinks"]["entities"] != facts["labels"]["entities"]:
        raise SystemExit("the hyperlinks-only and labelled corpora differ in their validation passages or entities")
    parallel = len(arms) if cfg["threads"] else 1
    log(f"grid {args.grid}{' (tiny)' if args.tiny else ''}: {len(arms)} arms x {steps} steps, {parallel} at once")
    with concurrent.futures.ThreadPoolExecutor(parallel) as pool:
        futures = {arm: pool.submit(train, args.grid, corpora, *arm, steps, args.tiny) for arm in arms}
        trains = {arm: f.result() for arm, f in futures.items()}
    evals, records = {}, {}
    log(f"evaluate {len(arms)} arms, {parallel} at once")
    with concurrent.futures.ProcessPoolExecutor(parallel, initializer=_one_thread if cfg["threads"] else None) as pool:
        futures = {arm: pool.submit(evaluate_arm, args.grid, corpora, *arm, args.tiny) for arm in arms}
        for arm, f in futures.items():
            evals[arm], records[arm] = f.result()
    results = assemble(args.grid, arms, corpora, evals, records, trains, steps, args.tiny)
    path = save(results, args.tiny)
    log(f"wrote {path}: pass {results['pass']}")


if __name__ == "__main__":
    main()
