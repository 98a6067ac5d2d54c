"""Ablation: do the entity memory and the missing-mention labels help? {BART, EDMem} x {hyperlinks, + labels}.

    python benchmarks/bench_ablation.py                          # the pre-registered CPU grid (below)
    python benchmarks/bench_ablation.py --report                 # tables, plot and docs from the JSON only
    python benchmarks/bench_ablation.py --config base --steps N  # on a GPU: the same grid at BART-large scale

Protocol, fixed before the first grid run (this docstring was committed before any result existed;
it is not changed after seeing results):

Grid. 2 dumps x 2 corpora x 2 models x 3 seeds = 24 training runs, every run with the same steps,
batch, sequence length, learning rate and schedule; seeds 1, 2, 3 (``train.seed``: initialisation,
sample order, masking, dropout), the same three for every variant, so variants are paired by seed.
- dumps: ``ukwiki`` = ../shared/wikidumps/ukwiki-2023-first100k-lines-truncated.xml.xz and
  ``enwiki206`` = ../shared/wikidumps/enwiki-2016-206pages-articles1.xml.bz2;
- corpora, from one dump by the corpus job with ``--keep_red_links true
  --validation_fraction 0.05`` (``enwiki206``: 0.1, it has ~100 articles): ``hyperlinks`` adds
  ``--labels.hyperlinks_only true`` (the editors' links alone), ``labels`` is the job's default
  (hyperlinks + the EDMem 3.3.1 labels). Same pages, split (a hash of the page id), windows and
  entity vocabulary (built from hyperlinks): checked by the script before training;
- models: ``bart`` = ``--model.memory none`` (the same encoder-decoder, no memory, LM loss only),
  ``edmem`` = ``--model.memory entity`` (the memory read in both stacks + the EL loss, lambda 1).

Training (config ``small``, CPU): configs/pretrain/tiny.yaml (d_model 64, 1 + 1 layers per stack,
entity_dim 32, dropout 0.1, P_rtm 0.3, P_ssm 0.5, lr 3e-3, 10% warm-up then linear decay, grad clip
1.0) with ``max_steps`` 32, global batch 8 (one micro-batch): 256 training sequences per run;
max_seq_len 160, entity_block_size 16384, ZeRO-2, fp32, 1 rank on DeepSpeed (CPU, gloo), no
validation pass during training, one checkpoint at the end. Two grid points run at once, each with
OMP_NUM_THREADS=1. Sized by measurement on this 2-core machine shared with five other jobs (load
average ~8-9): one EDMem step of 16 sequences on ukwiki took 8.4 s, one BART step of 8 on enwiki206
6.5 s, a run's start-up ~55 s and an evaluation of 192 passages ~90 s; the grid had to fit in ~70
minutes. 256 sequences are < 1% of an epoch of ukwiki and ~5% of enwiki206: a smoke-scale ablation,
where little beyond token statistics can be learned.
Config ``base``: configs/pretrain/base.yaml (BART-large geometry, its batch and lr) for ``--steps``
steps; meant for a GPU, not run here.

Evaluation (``trainer.evaluate``, the same for every run): the validation passages of the dump's
``hyperlinks`` corpus (the same pages in both corpora); gold mentions = the editors' hyperlinks
only; deterministic masking: every hyperlink mention salient-span masked, no random masking
(P_ssm 1, P_rtm 0); config ``small`` scores 128 validation passages per dump, evenly spaced in
passage-id order (the same for every run; ``base``: all); max_seq_len as in training (mentions whose
markers do not fit are dropped, and counted); entity ids mapped to each model's vocabulary by title (unmappable targets counted). Metrics:
- ``mention_lm_loss`` / ``mention_token_acc``: decoder cross-entropy / top-1 accuracy on the tokens
  of the masked hyperlink mentions (primary metric of both claims);
- ``other_lm_loss`` / ``other_token_acc``: the same on all other non-special tokens (visible in the
  input: reconstruction);
- ``el_acc``: acc@1 of the linking head at the hyperlinks (EDMem only; BART has no linker).

Statistics: per variant, the mean over the 3 seeds +- the half-width of the two-sided 95% Student t
interval (t_{0.975, 2} = 4.303). Effects as paired differences over seeds (same seed, same dump):
memory = edmem - bart (per corpus), labels = labels - hyperlinks (per model), mean +- the same t
interval. An effect is called supported at this scale when its interval excludes 0; otherwise the
figures do not resolve it. Whatever comes out is reported.

Exploratory follow-up (config ``small-long``, added after the ``small`` results were seen, so not
part of the pre-registration; fixed before its own run): the ``small`` protocol on ``enwiki206`` only,
with ``max_steps`` 96 (768 sequences, ~16% of an epoch), because at 32 steps the LM losses had barely
left their initial value and EL acc@1 was 0 there. Run with ``--config small-long --dumps enwiki206``;
written to benchmarks/results/ablation_small-long.{json,png} and a section of docs/ablation.md.

Outputs: benchmarks/results/ablation.json (config, per-run metrics and wall times, per-variant mean and
CI, paired effects, machine), benchmarks/results/ablation.png, docs/ablation.md (generated from the
JSON). Corpora are cached under out/ablation/corpora, runs under out/ablation/runs/CONFIG/ (a grid point
whose record.json exists is not rerun); progress, one line per finished grid point with an ETA, goes to
out/ablation/progress.log.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import datetime as dt
import json
import math
import os
import platform
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import grid_runs  # noqa: E402
from grid_runs import free_port  # noqa: E402

from trainer.evaluate import t_interval  # noqa: E402

WIKIDUMPS = Path(os.environ.get("WIKIDUMPS_DIR", REPO / ".." / "shared" / "wikidumps")).resolve()
DUMPS = {
    "ukwiki": ("ukwiki-2023-first100k-lines-truncated.xml.xz", 0.05),
    "enwiki206": ("enwiki-2016-206pages-articles1.xml.bz2", 0.1),
}
CORPORA = {"hyperlinks": ("--labels.hyperlinks_only", "true"), "labels": ()}
MODELS = {"bart": "none", "edmem": "entity"}
SEEDS = (1, 2, 3)
CORPUS_JOB_ARGS = ("--keep_red_links", "true")
CONFIGS = {
    "small": {"yaml": "configs/pretrain/tiny.yaml", "steps": 32, "parallel": 2, "threads": 1, "eval_passages": 128,
              "overrides": ("--train.global_batch_size", "8", "--train.micro_batch_size", "8",
                            "--data.max_seq_len", "160", "--model.max_positions", "160",
                            "--model.entity_block_size", "16384",
                            "--train.eval_every", "0", "--train.save_every", "0", "--train.keep_checkpoints", "1",
                            "--train.log_every", "25", "--train.plot", "false", "--train.bf16", "false")},
    "small-long": {"yaml": "configs/pretrain/tiny.yaml", "steps": 96, "parallel": 2, "threads": 1,
                   "eval_passages": 128, "overrides": None},  # small's overrides (filled in below)
    "base": {"yaml": "configs/pretrain/base.yaml", "steps": None, "parallel": 1, "threads": 0, "eval_passages": 0,
             "overrides": ("--train.eval_every", "0", "--train.save_every", "0", "--train.keep_checkpoints", "1",
                           "--train.plot", "false")},
}
CONFIGS["small-long"]["overrides"] = CONFIGS["small"]["overrides"]
METRICS = ("mention_lm_loss", "mention_token_acc", "other_lm_loss", "other_token_acc", "el_acc")
OUT = REPO / "out" / "ablation"
DOC = REPO / "docs" / "ablation.md"


def output_paths(config: str) -> tuple[Path, Path]:
    """(JSON, plot) of a config's grid: ablation.* for the pre-registered ``small``, ablation_CONFIG.* else."""
    stem = "ablation" if config == "small" else f"ablation_{config}"
    return REPO / "benchmarks" / "results" / f"{stem}.json", REPO / "benchmarks" / "results" / f"{stem}.png"


def log(msg: str) -> None:
    """A time-stamped progress line, printed and appended to OUT/progress.log."""
    grid_runs.log(msg, OUT)


def machine() -> dict:
    import torch

    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    return {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count(),
            "torch": torch.__version__, "gpu": gpu, "processor": platform.processor(),
            "load_avg_at_start": os.getloadavg()}


# ----------------------------------------------------------------------------- corpora


def build_corpus(dump: str, corpus: str) -> Path:
    """The corpus job's output for (dump, corpus), made once (the arguments it was made with are kept beside it)."""
    name, fraction = DUMPS[dump]
    out = OUT / "corpora" / f"{dump}-{corpus}"
    args = ["--input", str(WIKIDUMPS / name), "--output", str(out), *CORPUS_JOB_ARGS,
            "--validation_fraction", str(fraction), *CORPORA[corpus]]
    stamp = out.parent / f"{out.name}.args.json"
    if (out / "manifest.json").exists() and stamp.exists() and json.loads(stamp.read_text()) == args:
        return out
    log(f"corpus job: {dump} {corpus}")
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pipelines.wiki_mentions", *args, "--progress_every_s", "60"],
                          cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"corpus job failed for {dump} {corpus}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    stamp.write_text(json.dumps(args))
    log(f"corpus job: {dump} {corpus} done in {time.monotonic() - started:.0f} s")
    return out


def corpus_facts(root: Path) -> dict:
    """Pages, passages and mentions by source per split; what the comparison of two corpora needs."""
    import pyarrow.parquet as pq

    facts = {}
    for split in ("train", "validation"):
        pages, passages, sources = set(), 0, {}
        for path in sorted((root / "passages").glob(f"{split}-*.parquet")):
            t = pq.read_table(path, columns=["page_id", "mentions"])
            pages.update(t.column("page_id").to_pylist())
            passages += t.num_rows
            for mentions in t.column("mentions").to_pylist():
                for m in mentions:
                    sources[m["source"]] = sources.get(m["source"], 0) + 1
        facts[split] = {"pages": sorted(pages), "passages": passages, "mentions_by_source": dict(sorted(sources.items()))}
    vocab = pq.read_table(root / "entity_vocab" / "entity_vocab.parquet", columns=["entity"]).column(0).to_pylist()
    facts["entities"] = len(vocab)
    facts["vocab_fingerprint"] = hash(tuple(vocab))
    return facts


def majority_baseline(hyper: Path, eval_passages: int) -> dict:
    """EL acc@1 of always answering the entity most linked in training (the vocabulary's first row), on the
    linking targets the evaluation scores: what a linking head that learned only the prior reaches."""
    import pyarrow.parquet as pq

    from trainer.data import open_corpus
    from trainer.evaluate import gold_passages, select_passages

    vocab = pq.read_table(hyper / "entity_vocab" / "entity_vocab.parquet").to_pylist()
    top = max((r for r in vocab if r["entity_id"] >= 3), key=lambda r: r["count"])
    rows, _ = gold_passages(hyper, open_corpus(hyper, verify_sha256=False).validation_shards, None)
    targets = [m["entity_id"] for r in select_passages(rows, eval_passages) for m in r["mentions"]
               if m["entity_id"] >= 3]
    return {"entity": top["entity"], "el_acc": sum(t == top["entity_id"] for t in targets) / max(1, len(targets)),
            "targets": len(targets)}


def check_pair(dump: str, hyper: Path, labelled: Path) -> dict:
    """The two corpora of a dump must share pages, split and vocabulary; -> their summary for the JSON."""
    a, b = corpus_facts(hyper), corpus_facts(labelled)
    for split in ("train", "validation"):
        if a[split]["pages"] != b[split]["pages"] or a[split]["passages"] != b[split]["passages"]:
            raise SystemExit(f"{dump}: the hyperlinks-only and labelled corpora differ in their {split} pages/windows")
    if a["vocab_fingerprint"] != b["vocab_fingerprint"]:
        raise SystemExit(f"{dump}: the two corpora have different entity vocabularies")
    if set(a["train"]["mentions_by_source"]) - {"hyperlink"}:
        raise SystemExit(f"{hyper}: a hyperlinks-only corpus with labels")
    summary = {}
    for name, f in (("hyperlinks", a), ("labels", b)):
        summary[name] = {split: {"pages": len(f[split]["pages"]), "passages": f[split]["passages"],
                                 "mentions_by_source": f[split]["mentions_by_source"]}
                         for split in ("train", "validation")}
        summary[name]["entities"] = f["entities"]
        train = f["train"]["mentions_by_source"]
        summary[name]["train_mentions_per_hyperlink"] = sum(train.values()) / max(1, train.get("hyperlink", 0))
    return summary


# ----------------------------------------------------------------------------- grid points


def grid_point(cfg: dict, config: str, steps: int, dump: str, corpus: str, model: str, seed: int,
               corpora: dict) -> dict:
    """Train one grid point (trainer.pretrain, 1 rank) and evaluate it (trainer.evaluate); -> its record."""
    run_dir = OUT / "runs" / config / f"{dump}-{corpus}-{model}-s{seed}"
    eval_path = run_dir / "eval.json"
    record_path = run_dir / "record.json"
    if record_path.exists():
        return json.loads(record_path.read_text())
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "MASTER_PORT": str(free_port()), "PYTHONPATH": str(REPO)}
    if cfg["threads"]:
        env.update(OMP_NUM_THREADS=str(cfg["threads"]), MKL_NUM_THREADS=str(cfg["threads"]))
    train_args = ["--config", cfg["yaml"], "--data.path", str(corpora[(dump, corpus)]), "--train.output_dir",
                  str(run_dir), "--train.max_steps", str(steps), "--train.seed", str(seed), "--model.memory",
                  MODELS[model], "--train.resume", "none", *cfg["overrides"]]
    if run_dir.exists():  # an unfinished earlier attempt: start it again from scratch
        import shutil

        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    started = time.monotonic()
    with open(run_dir / "train.log", "w") as out:
        proc = subprocess.run([sys.executable, "-m", "trainer.pretrain", *train_args], cwd=REPO, env=env,
                              stdout=out, stderr=subprocess.STDOUT)
    train_s = time.monotonic() - started
    if proc.returncode != 0:
        raise RuntimeError(f"training failed ({proc.returncode}): {run_dir / 'train.log'}")
    # trainer.evaluate in this process (what `wikiedm evaluate --checkpoint RUN --corpus HYPERLINKS` runs),
    # saving an interpreter start per grid point
    from trainer.evaluate import evaluate, load_checkpoint
    from trainer.metrics import read_metrics

    started = time.monotonic()
    net, run_config = load_checkpoint(run_dir)
    import torch

    net.to("cuda" if torch.cuda.is_available() else "cpu")  # config base on a GPU: evaluate there too
    metrics = evaluate(net, corpora[(dump, "hyperlinks")], run_config["data"]["path"], 32,
                       run_config["data"]["max_seq_len"], cfg["eval_passages"])
    eval_path.write_text(json.dumps(metrics, indent=2) + "\n")
    eval_s = time.monotonic() - started
    del net

    train_rows = [r for r in read_metrics(run_dir / "metrics.jsonl") if r.get("split") == "train"]
    last = train_rows[-1]
    record = {"dump": dump, "corpus": corpus, "model": model, "seed": seed, "steps": steps,
              "metrics": json.loads(eval_path.read_text()), "train_s": round(train_s, 1), "eval_s": round(eval_s, 1),
              "final_train": {k: last.get(k) for k in ("step", "loss", "lm_loss", "el_loss", "el_acc", "tokens_per_s")},
              "run_dir": str(run_dir.relative_to(REPO))}
    record_path.write_text(json.dumps(record, indent=2))
    # the checkpoint is not needed once evaluated (its eval.json and metrics stay): keep out/ small
    import shutil

    shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
    return record


# ----------------------------------------------------------------------------- statistics and reports


def variant_key(r: dict) -> tuple[str, str, str]:
    return r["dump"], r["corpus"], r["model"]


def summarize(runs: list[dict]) -> dict:
    """Per variant: mean and t-interval over seeds; effects: paired (by dump and seed) differences."""
    by_variant: dict = {}
    for r in runs:
        by_variant.setdefault(variant_key(r), {})[r["seed"]] = r["metrics"]
    variants = []
    for (dump, corpus, model), seeds in sorted(by_variant.items()):
        v = {"dump": dump, "corpus": corpus, "model": model, "seeds": sorted(seeds)}
        for m in METRICS:
            v[m] = t_interval([seeds[s][m] for s in sorted(seeds)])
        variants.append(v)
    effects = []

    def paired(dump, a, b, name, fixed):
        sa, sb = by_variant.get((dump, *a), {}), by_variant.get((dump, *b), {})
        common = sorted(set(sa) & set(sb))
        if not common:
            return
        e = {"dump": dump, "effect": name, "fixed": fixed, "a": "/".join(a), "b": "/".join(b), "seeds": common}
        for m in METRICS:
            vals = [sa[s][m] - sb[s][m] for s in common if sa[s][m] is not None and sb[s][m] is not None]
            e[m] = t_interval(vals)
        effects.append(e)

    for dump in DUMPS:
        for corpus in CORPORA:
            paired(dump, (corpus, "edmem"), (corpus, "bart"), "memory", corpus)
        for model in MODELS:
            paired(dump, ("labels", model), ("hyperlinks", model), "labels", model)
    return {"variants": variants, "effects": effects}


def fmt(stat: dict | None, digits: int = 3) -> str:
    if not stat or stat.get("mean") is None:
        return "-"
    return f"{stat['mean']:.{digits}f}" + (f" ± {stat['ci']:.{digits}f}" if stat.get("ci") is not None else "")


# Lower is better for losses, higher for accuracies: the sign of a helpful effect.
BETTER = {"mention_lm_loss": -1, "mention_token_acc": 1, "other_lm_loss": -1, "other_token_acc": 1, "el_acc": 1}


def verdict(e: dict, metric: str) -> str:
    s = e[metric]
    if not s or s.get("mean") is None or s.get("ci") is None:
        return "not measured (fewer than 2 seeds)"
    lo, hi = s["mean"] - s["ci"], s["mean"] + s["ci"]
    if s["mean"] == 0 and s["ci"] == 0:
        return "no difference on any seed"
    if lo > 0 or hi < 0:
        helps = (s["mean"] > 0) == (BETTER[metric] > 0)
        return "helps (interval excludes 0)" if helps else "hurts (interval excludes 0)"
    return "not resolved (interval includes 0)"


def write_plot(results: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants = results["summary"]["variants"]
    dumps = [d for d in DUMPS if any(v["dump"] == d for v in variants)]
    shown = ("mention_lm_loss", "other_lm_loss", "el_acc")
    fig, axes = plt.subplots(len(dumps), len(shown), figsize=(4.2 * len(shown), 3.2 * len(dumps)), squeeze=False)
    colors = {"bart": "#999999", "edmem": "#1f77b4"}
    for row, dump in enumerate(dumps):
        for col, metric in enumerate(shown):
            ax = axes[row][col]
            labels, means, cis, cs = [], [], [], []
            for corpus in CORPORA:
                for model in MODELS:
                    v = next((x for x in variants if (x["dump"], x["corpus"], x["model"]) == (dump, corpus, model)),
                             None)
                    if v is None or v[metric]["mean"] is None:
                        continue
                    labels.append(f"{model}\n{corpus}")
                    means.append(v[metric]["mean"])
                    cis.append(v[metric]["ci"] or 0)
                    cs.append(colors[model])
            ax.bar(range(len(means)), means, yerr=cis, color=cs, capsize=4)
            ax.set_xticks(range(len(means)), labels, fontsize=8)
            ax.set_title(f"{dump}: {metric}", fontsize=10)
            if means and "loss" in metric:
                lo = min(m - c for m, c in zip(means, cis))
                hi = max(m + c for m, c in zip(means, cis))
                ax.set_ylim(max(0, lo - 0.1 * (hi - lo + 1e-9)), hi + 0.1 * (hi - lo + 1e-9))
    fig.suptitle(f"Ablation ({results['config']['name']}, {results['config']['steps']} steps): "
                 "mean ± 95% t-interval over seeds", fontsize=10)
    fig.tight_layout()
    plot = output_paths(results["config"]["name"])[1]
    plot.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(plot, dpi=100)
    plt.close(fig)


def result_lines(results: dict, heading: str = "##") -> list[str]:
    """The per-dump tables (variants, paired effects) and the verdicts of one grid's results."""
    summary = results["summary"]
    lines = []
    for dump in DUMPS:
        rows = [v for v in summary["variants"] if v["dump"] == dump]
        if not rows:
            continue
        dump_runs = [r for r in results["runs"] if r["dump"] == dump]
        ev = next((r["metrics"] for r in dump_runs if r["model"] == "edmem"), dump_runs[0]["metrics"])
        lines += [f"{heading}# {dump}", "",
                  f"Validation: {ev['passages']} passages, {ev['hyperlinks']} hyperlinks ({ev['mention_tokens']} "
                  f"mention tokens, {ev['other_tokens']} other tokens), {ev['el_targets'] or '-'} linking targets "
                  f"in the vocabulary; {ev['dropped_mentions']} mentions dropped by the sequence length. "
                  + (f"Always answering the entity most linked in training ({base['entity']}) gets EL acc@1 "
                     f"{base['el_acc']:.3f} on these targets." if (base := results["corpora"].get(dump, {}).get(
                         "el_majority_baseline")) else ""), "",
                  "| model | corpus | seeds | mention LM loss | mention token acc | other LM loss | other token acc | "
                  "EL acc@1 |", "|---|---|---:|---:|---:|---:|---:|---:|"]
        for v in rows:
            lines.append(f"| {v['model']} | {v['corpus']} | {len(v['seeds'])} | {fmt(v['mention_lm_loss'])} | "
                         f"{fmt(v['mention_token_acc'])} | {fmt(v['other_lm_loss'])} | {fmt(v['other_token_acc'])} | "
                         f"{fmt(v['el_acc'])} |")
        lines += ["", "Paired effects (same dump and seed; a - b):", "",
                  "| effect | a - b | mention LM loss | mention token acc | other LM loss | EL acc@1 | "
                  "on mention LM loss |", "|---|---|---:|---:|---:|---:|---|"]
        for e in (x for x in summary["effects"] if x["dump"] == dump):
            lines.append(f"| {e['effect']} | {e['a']} - {e['b']} | {fmt(e['mention_lm_loss'])} | "
                         f"{fmt(e['mention_token_acc'])} | {fmt(e['other_lm_loss'])} | {fmt(e['el_acc'])} | "
                         f"{verdict(e, 'mention_lm_loss')} |")
        lines.append("")
    lines += [f"{heading} What the figures support", ""]
    for e in summary["effects"]:
        metrics = ("mention_lm_loss", "el_acc") if e["effect"] == "labels" and e["fixed"] == "edmem" \
            else ("mention_lm_loss",)
        said = "; ".join(f"{m}: {verdict(e, m)}" for m in metrics if e[m].get("mean") is not None)
        lines.append(f"- {e['dump']}, {e['effect']} ({e['a']} vs {e['b']}): {said}.")
    return lines


def batch_size(cfg: dict) -> str:
    return dict(zip(cfg["overrides"][::2], cfg["overrides"][1::2])).get("--train.global_batch_size", "?")


def reading_lines(results: dict) -> list[str]:
    """How to read the verdicts (written after the small grid's results were seen; the numbers are the JSON's)."""
    summary = results["summary"]

    def effect(dump, name, fixed):
        return next((e for e in summary["effects"] if (e["dump"], e["effect"], e["fixed"]) == (dump, name, fixed)),
                    None)

    def variant(dump, corpus, model):
        return next((v for v in summary["variants"] if (v["dump"], v["corpus"], v["model"]) == (dump, corpus, model)),
                    None)

    lines = ["Reading the verdicts (added after the results were in; the protocol did not change):", ""]
    dumps = [d for d in DUMPS if d in results["corpora"]]
    for dump in dumps:
        mem = effect(dump, "memory", "hyperlinks")
        bart, edmem = variant(dump, "hyperlinks", "bart"), variant(dump, "hyperlinks", "edmem")
        base = results["corpora"].get(dump, {}).get("el_majority_baseline")
        if not (mem and bart and edmem and base) or mem["mention_lm_loss"]["mean"] is None:
            continue
        on_mentions, on_other = mem["mention_lm_loss"]["mean"], mem["other_lm_loss"]["mean"]
        shared = on_mentions * on_other > 0 and abs(on_mentions - on_other) <= 0.25 * max(abs(on_mentions),
                                                                                          abs(on_other)) + 0.02
        why = ("a difference the other tokens share: the two objectives train the LM at different speeds, it is not "
               "entity knowledge" if shared else
               f"the two differ by {on_mentions - on_other:+.2f} nats, but with mention-token accuracy near 0 on "
               "both sides and losses this close to the uniform guess that is a difference in how far each has moved "
               "off it, not entity knowledge (which would show as mention tokens predicted)")
        lines.append(
            f"- {dump}: BART's mention-token loss is {bart['mention_lm_loss']['mean']:.2f} nats and its mention "
            f"token accuracy {bart['mention_token_acc']['mean']:.3f} (a uniform guess over the "
            f"{50263:,}-token vocabulary is {math.log(50263):.2f} nats). EDMem - BART is "
            f"{on_mentions:+.2f} nats on mention tokens and {on_other:+.2f} on the other tokens: {why}. "
            f"EDMem's EL acc@1 is "
            f"{edmem['el_acc']['mean']:.3f}, against {base['el_acc']:.3f} for always answering the most linked "
            + ("entity: its linking head has learned nothing beyond that."
               if edmem["el_acc"]["mean"] - (edmem["el_acc"]["ci"] or 0) <= base["el_acc"] else
               "entity: above it, though not by much in absolute terms."))
    lines += [
        f"- In {'both dumps' if len(dumps) > 1 else dumps[0]} the models are close to where they started"
        " (losses near the uniform guess on enwiki206"
        + ("; on ukwiki the loss is lower because GPT-2's byte-level BPE cuts Cyrillic into more tokens than"
           " characters, few distinct and frequent, whose frequencies are learned fast" if "ukwiki" in dumps else "")
        + f"), so a few hundredths of a nat move with the optimisation path, and {len(summary['effects'])} effects"
        f" x {len(results['config']['seeds'])} seeds give room for an interval that excludes 0 by chance.",
        "- So this grid does not support claim (a) or claim (b), and does not refute them: at "
        f"{results['config']['steps'] * int(batch_size(results['config']))} training passages neither the memory"
        " nor the labels can show what they are for.",
        "",
    ]
    return lines


def trend_lines(short: dict, long: dict) -> list[str]:
    """The same variant's held-out losses after the short and the long run (mean over seeds)."""
    lines, rises = [], []
    for v in long["summary"]["variants"]:
        w = next((x for x in short["summary"]["variants"]
                  if (x["dump"], x["corpus"], x["model"]) == (v["dump"], v["corpus"], v["model"])), None)
        if w is None or v["mention_lm_loss"]["mean"] is None or w["mention_lm_loss"]["mean"] is None:
            continue
        rises.append(v["mention_lm_loss"]["mean"] > w["mention_lm_loss"]["mean"]
                     and v["other_lm_loss"]["mean"] < w["other_lm_loss"]["mean"])
        lines.append(f"| {v['dump']} | {v['model']} | {v['corpus']} | {w['mention_lm_loss']['mean']:.3f} -> "
                     f"{v['mention_lm_loss']['mean']:.3f} | {w['other_lm_loss']['mean']:.3f} -> "
                     f"{v['other_lm_loss']['mean']:.3f} |")
    if not lines:
        return []
    return [f"From {short['config']['steps']} to {long['config']['steps']} steps (mean over seeds):", "",
            "| dump | model | corpus | mention LM loss | other LM loss |", "|---|---|---|---|---|", *lines, "",
            *(["In every variant the loss on the visible tokens falls while the loss on the masked mention tokens "
               "rises: with more steps the models first learn to reproduce what they see, and put less probability "
               "on the right tokens where they see <mask>; none has started to fill in entity names.", ""]
              if rises and all(rises) else [])]


def write_doc(results: dict) -> None:
    """docs/ablation.md from the pre-registered grid's results, plus a section per other grid on record."""
    cfg = results["config"]
    n_runs, n_planned = len(results["runs"]), results["grid_points_planned"]
    lines = [
        "# Ablation: do the entity memory and the missing-mention labels help?",
        "",
        "Generated by `python benchmarks/bench_ablation.py` from `benchmarks/results/ablation.json`; the plot is",
        "`benchmarks/results/ablation.png`. The protocol (grid, steps, seeds, metrics, statistics) is the",
        "docstring of `benchmarks/bench_ablation.py`, fixed before the grid ran.",
        "",
        "Two claims carry the design: (a) the entity memory helps the model with entity knowledge (EDMem vs",
        "the same BART without memory, `--model.memory none`); (b) the missing-mention labels (EDMem §3.3.1)",
        "add useful supervision beyond the editors' hyperlinks (the corpus job's default vs",
        "`--labels.hyperlinks_only true`).",
        "",
        *learning_section(),
        "## Setup",
        "",
        f"- config `{cfg['name']}`: `{cfg['yaml']}` + `{' '.join(cfg['overrides'])}`; {cfg['steps']} optimizer steps,"
        f" seeds {', '.join(map(str, cfg['seeds']))}; the same for every variant.",
        f"- grid points finished: {n_runs} of {n_planned}"
        + ("" if n_runs == n_planned else " (a partial grid)") + ".",
        f"- machine: {results['machine']['platform']}, {results['machine']['cpus']} CPU cores"
        + (f", {results['machine']['gpu']}" if results["machine"].get("gpu") else ", no GPU")
        + f"; shared with other work (load average at start {results['machine']['load_avg_at_start'][0]:.1f}).",
        "- evaluation (`wikiedm evaluate`, `trainer/evaluate.py`): the validation pages of each dump's",
        "  hyperlinks-only corpus, gold = the editors' hyperlinks; every hyperlink mention salient-span masked,",
        "  nothing else masked. `mention` = the masked mention tokens; `other` = every other non-special token",
        "  (visible in the input). EL acc@1 = the linking head at the hyperlinks (EDMem only).",
        "- figures: mean ± half-width of the two-sided 95% Student t interval over the seeds.",
        "",
        "Corpora (train split; validation pages are the same in both corpora of a dump):",
        "",
        "| dump | corpus | train pages | train passages | validation passages | train mentions / hyperlink |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for dump, pair in results["corpora"].items():
        for corpus, c in ((name, pair[name]) for name in CORPORA):
            lines.append(f"| {dump} | {corpus} | {c['train']['pages']} | {c['train']['passages']} | "
                         f"{c['validation']['passages']} | x{c['train_mentions_per_hyperlink']:.2f} |")
    lines += ["", "## Results", "", *result_lines(results), "", *(reading_lines(results) if cfg["name"] == "small"
                                                                    else [])]
    batch = dict(zip(cfg["overrides"][::2], cfg["overrides"][1::2])).get("--train.global_batch_size", "?")
    train_passages = ", ".join(f"{c['labels']['train']['passages']:,}" for c in results["corpora"].values())
    lines += [
        "",
        f"What they do not support: anything beyond this scale. Config `{cfg['name']}` trains each model for "
        f"{cfg['steps']} steps of {batch} passages",
        f"(train splits of {train_passages} passages), on CPU"
        + (": `configs/pretrain/tiny.yaml` is 64 wide with one layer below and one above the memory read in "
           "each stack." if cfg["name"] == "small" else "."),
        "EDMem's claims are about BART-large trained for days on all of Wikipedia. An effect that is not",
        "resolved here is not shown absent, and one that is resolved here is not shown to persist at scale.",
        "The same script runs the grid at BART-large geometry on a GPU (`--config base --steps N`)"
        + ("; that has not been run." if cfg["name"] == "small" else "."),
        "",
        "The `make demo-train` run is different on purpose: it trains on 64 passages repeated so that the",
        "training losses fall fast, and it overfits (its validation EL accuracy stays at 0 and its validation",
        "EL loss rises). It shows the trainer works, not that the model generalises; this page is the",
        "measurement of what the memory and the labels do on held-out pages.",
        "",
    ]
    for name in CONFIGS:
        path = output_paths(name)[0]
        if name == "small" or not path.exists():
            continue
        extra = json.loads(path.read_text())
        c = extra["config"]
        lines += [f"## Exploratory: config `{name}` (added after the `small` results were seen)", "",
                  f"The `small` protocol with {c['steps']} steps, on {', '.join(c['dumps'])}; seeds "
                  f"{', '.join(map(str, c['seeds']))}; {len(extra['runs'])} of {extra['grid_points_planned']} grid "
                  f"points finished. Not pre-registered: read it as a look at the trend with more training. Files: "
                  f"`{path.relative_to(REPO)}`, `{output_paths(name)[1].relative_to(REPO)}`.", "",
                  *result_lines(extra, "###"), "", *reading_lines(extra), *trend_lines(results, extra)]
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text("\n".join(lines))


def learning_section() -> list[str]:
    """The positive control's section (benchmarks/bench_learning.py, learning.json), first on the page; then a
    note on how the grid below was measured."""
    path = REPO / "benchmarks" / "results" / "learning.json"
    if not path.exists():
        return []
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_learning import doc_sections

    return [*doc_sections(),
            "## The 24-run grid (before the positive control)", "",
            "The grid below predates the evaluation above: its token losses and accuracies are over the whole",
            "vocabulary (the markers [Es]/[Ee] in the softmax and the argmax: a token accuracy of 0.000 there is a",
            "model predicting a marker), it scored 128 validation passages, it has no baselines beside the",
            "most-frequent entity, and its EL loss was the sum of the three reads (3x the weight of EDMem's mean).",
            "Every model in it stayed at or above the unigram floor. Its checkpoints were not kept, so it cannot be",
            "re-scored; the positive control and its ablation arms above replace it.", ""]


def save(results: dict) -> None:
    results["summary"] = summarize(results["runs"])
    path = output_paths(results["config"]["name"])[0]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")
    if results["runs"]:
        write_plot(results)
        main_results = output_paths("small")[0]
        if main_results.exists():
            write_doc(json.loads(main_results.read_text()))


# ----------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", choices=sorted(CONFIGS), default="small")
    ap.add_argument("--steps", type=int, default=0, help="optimizer steps per run (default: the config's; base needs it)")
    ap.add_argument("--parallel", type=int, default=0, help="grid points at once (default: the config's)")
    ap.add_argument("--dumps", default=",".join(DUMPS), help="comma-separated subset of " + ",".join(DUMPS))
    ap.add_argument("--report", action="store_true", help="only rewrite the plot and docs from the JSON")
    ap.add_argument("--only", default="", help="debugging: one grid point DUMP/CORPUS/MODEL/SEED (not written to "
                                               "the results)")
    args = ap.parse_args(argv)
    if args.report:
        results = json.loads(output_paths(args.config)[0].read_text())
        for dump, summary in results["corpora"].items():  # results written before the baseline was recorded
            if "el_majority_baseline" not in summary:
                summary["el_majority_baseline"] = majority_baseline(OUT / "corpora" / f"{dump}-hyperlinks",
                                                                    CONFIGS[args.config]["eval_passages"])
        save(results)
        return
    cfg = CONFIGS[args.config]
    if cfg["threads"]:  # the in-process evaluations, like the training subprocesses
        import torch

        torch.set_num_threads(cfg["threads"])
    steps = args.steps or cfg["steps"]
    if not steps:
        raise SystemExit(f"--config {args.config} needs --steps N")
    dumps = [d for d in args.dumps.split(",") if d]
    corpora, corpus_summary = {}, {}
    for dump in dumps:
        for corpus in CORPORA:
            corpora[(dump, corpus)] = build_corpus(dump, corpus)
        corpus_summary[dump] = check_pair(dump, corpora[(dump, "hyperlinks")], corpora[(dump, "labels")])
        corpus_summary[dump]["el_majority_baseline"] = majority_baseline(corpora[(dump, "hyperlinks")],
                                                                         cfg["eval_passages"])
    if args.only:
        dump, corpus, model, seed = args.only.split("/")
        started = time.monotonic()
        record = grid_point(cfg, f"{args.config}-only", steps, dump, corpus, model, int(seed), corpora)
        print(json.dumps(record, indent=2))
        log(f"--only {args.only}: {time.monotonic() - started:.0f} s")
        return
    points = [(dump, corpus, model, seed) for seed in SEEDS for dump in dumps for corpus in CORPORA for model in MODELS]
    results = {"what": __doc__.splitlines()[0],
               "config": {"name": args.config, "yaml": cfg["yaml"], "overrides": list(cfg["overrides"]),
                          "steps": steps, "seeds": list(SEEDS), "parallel": args.parallel or cfg["parallel"],
                          "omp_threads": cfg["threads"] or None, "corpus_job_args": list(CORPUS_JOB_ARGS),
                          "dumps": {d: {"file": DUMPS[d][0], "validation_fraction": DUMPS[d][1]} for d in dumps}},
               "machine": machine(), "corpora": corpus_summary, "grid_points_planned": len(points), "runs": [],
               "started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
    lock = threading.Lock()
    started = time.monotonic()
    log(f"grid: {len(points)} points, config {args.config}, {steps} steps, {results['config']['parallel']} at once")

    def one(point):
        t0 = time.monotonic()
        record = grid_point(cfg, args.config, steps, *point, corpora)
        with lock:
            results["runs"].append(record)
            results["runs"].sort(key=lambda r: (r["dump"], r["corpus"], r["model"], r["seed"]))
            results["wall_s"] = round(time.monotonic() - started, 1)
            save(results)
            done = len(results["runs"])
            elapsed = time.monotonic() - started
            eta = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=elapsed / done * (len(points) - done))
            m = record["metrics"]
            log(f"{done}/{len(points)} {'/'.join(map(str, point))}: {time.monotonic() - t0:.0f} s (train "
                f"{record['train_s']:.0f}, eval {record['eval_s']:.0f}); mention loss {m['mention_lm_loss']:.3f}"
                + (f", EL acc {m['el_acc']:.3f}" if m["el_acc"] is not None else "")
                + f"; ETA {eta:%H:%M} UTC")

    failures = []
    with concurrent.futures.ThreadPoolExecutor(results["config"]["parallel"]) as pool:
        for point, future in [(p, pool.submit(one, p)) for p in points]:
            try:
                future.result()
            except Exception as exc:  # one failed point is logged and the grid goes on
                failures.append(f"{'/'.join(map(str, point))}: {exc}")
                log(f"FAILED {'/'.join(map(str, point))}: {exc}")
    results["failures"] = failures
    results["finished"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    save(results)
    log(f"grid done: {len(results['runs'])}/{len(points)} points in {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
