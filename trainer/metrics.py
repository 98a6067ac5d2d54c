"""Step metrics: exact aggregation over micro-batches and ranks, log lines, metrics.jsonl, MFU, loss plot."""
from __future__ import annotations

import json
import time
from pathlib import Path

import torch
import torch.distributed as dist

# Sums and counts returned by EDMem.forward; ratios are taken only after summing over ranks.
SUM_KEYS = ("lm_sum", "lm_tokens", "el_enc_sum", "el_enc_count", "el_dec_sum", "el_dec_count",
            "el_head_sum", "el_head_count", "el_enc_correct", "el_dec_correct", "el_head_correct",
            "el_correct_masked", "el_masked", "el_correct")
# Counted on the host from the batches and the trainer (no device work).
EXTRA_KEYS = ("input_tokens", "dropped_mentions", "truncated_tokens", "samples", "memory_comm_bytes", "steps",
              "data_wait_s")
READS = ("enc", "dec", "head")

# Dense bf16 peak TFLOP/s per device, for MFU.
PEAK_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0, "A10G": 125.0, "L4": 121.0, "V100": 125.0}


class StepAccumulator:
    """Sums of the model's counters over micro-batches (and, at read time, over ranks).

    The model's counters stay on its device and are summed there: adding a micro-batch never
    waits for the device. The host-side counts (tokens, samples, bytes) are plain floats.
    ``reduce`` makes the one transfer and the one all-reduce, at logging steps only.
    """

    def __init__(self):
        self.reset()

    def reset(self):
        self.sums = None  # device tensor, created by the first add
        self.extras = dict.fromkeys(EXTRA_KEYS, 0.0)

    def add(self, out: dict, batch: dict) -> None:
        vals = torch.stack([out[k].detach().to(torch.float64) for k in SUM_KEYS])
        self.sums = vals if self.sums is None else self.sums + vals
        self.extras["input_tokens"] += float(batch["attention_mask"].sum()) + float(batch["labels"].ne(-100).sum())
        self.extras["dropped_mentions"] += batch["dropped_mentions"]
        self.extras["truncated_tokens"] += batch["truncated_tokens"]
        self.extras["samples"] += len(batch["passage_ids"])

    def add_step(self, memory_comm_bytes: float, data_wait_s: float = 0.0) -> None:
        """One optimizer step: the memory's bytes, and how long the loop waited for the step's batches."""
        self.extras["memory_comm_bytes"] += memory_comm_bytes
        self.extras["data_wait_s"] += data_wait_s
        self.extras["steps"] += 1

    def reduce(self, device) -> dict:
        sums = self.sums if self.sums is not None else torch.zeros(len(SUM_KEYS), dtype=torch.float64, device=device)
        t = torch.cat([sums.to(device), torch.tensor([self.extras[k] for k in EXTRA_KEYS], dtype=torch.float64,
                                                     device=device)])
        world = 1
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(t)
            world = dist.get_world_size()
        out = dict(zip(SUM_KEYS + EXTRA_KEYS, t.cpu().tolist()))
        out["world_size"] = world
        return out


def summarize(s: dict, el_weight: float) -> dict:
    """Global ratios: LM loss per target token, EL loss the mean over the three reads (each a mean over mentions),
    as in EDMem.forward."""
    lm_loss = s["lm_sum"] / max(s["lm_tokens"], 1)
    el_loss = sum(s[f"el_{r}_sum"] / max(s[f"el_{r}_count"], 1) for r in READS) / len(READS)
    record = {
        "loss": lm_loss + el_weight * el_loss,
        "lm_loss": lm_loss,
        "el_loss": el_loss,
        "el_acc": s["el_correct_masked"] / max(s["el_masked"], 1),  # final head, masked mentions, acc@1
        "el_acc_all": s["el_correct"] / max(s["el_head_count"], 1),
        "mentions": int(s["el_head_count"]),
        "dropped_mentions": int(s["dropped_mentions"]),
        "truncated_tokens": int(s["truncated_tokens"]),
    }
    for r in READS:  # acc@1 of each read on mentions with a known entity
        record[f"el_acc_{r}"] = s[f"el_{r}_correct"] / max(s[f"el_{r}_count"], 1)
    if s.get("steps"):  # per rank per optimizer step (each sum is over ranks)
        record["memory_comm_bytes"] = s["memory_comm_bytes"] / s["steps"]  # bytes the entity memory communicated
        record["data_wait_s"] = s["data_wait_s"] / s["steps"]  # seconds the loop waited for the step's batches
    return record


def loss_grad_norms(module: torch.nn.Module, inputs: dict) -> dict:
    """The L2 norms of the gradients of the LM term and of the weighted EL term (el_weight x EL) alone, on one
    micro-batch, before clipping: how the two losses share the update that global-norm clipping scales as a
    whole. A forward of its own on detached copies of the parameters (``torch.func.functional_call``): no
    DeepSpeed gradient hook fires and no ``.grad`` changes; the RNG is forked, so dropout in the training
    step is the same with or without it. -> {"lm_grad_norm", "el_grad_norm"} (the latter absent without
    an EL term)."""
    params = {n: p.detach().requires_grad_(p.requires_grad) for n, p in module.named_parameters()}
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        out = torch.func.functional_call(module, params, (), inputs)
    leaves = [p for p in params.values() if p.requires_grad]
    norms = {}
    for key, term in (("lm_grad_norm", out.get("lm_term")), ("el_grad_norm", out.get("el_term"))):
        if term is None or not term.requires_grad:
            continue
        grads = torch.autograd.grad(term, leaves, retain_graph=True, allow_unused=True)
        norms[key] = float(torch.sqrt(sum((g.float() ** 2).sum() for g in grads if g is not None)))
    return norms


def peak_flops(configured_tflops: float) -> float | None:
    if configured_tflops > 0:
        return configured_tflops * 1e12
    if not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name()
    for key, tflops in PEAK_TFLOPS.items():
        if key in name:
            return tflops * 1e12
    return None


def flops_per_step(non_embedding_params: int, d_model: int, vocab_size: int, entity_dim: int, n_entities: int,
                   input_tokens: float, target_tokens: float, mentions_per_read: float) -> float:
    """Model FLOPs of one optimizer step (forward + backward, no recomputation), attention's quadratic term ignored.

    input_tokens counts encoder and decoder positions, each of which passes one stack. A
    memory read of M queries over N x D costs 2MND (scores) + 2MND (weighted sum) forward and
    twice that backward; the linking head has no weighted sum: (2 x 12 + 6) M N D in all.
    """
    transformer = 6.0 * non_embedding_params * input_tokens / 2
    lm_head = 6.0 * d_model * vocab_size * target_tokens
    memory = 30.0 * mentions_per_read * n_entities * entity_dim
    return transformer + lm_head + memory


REPORT_SINKS = ("tensorboard", "wandb")
TENSORBOARD_DIR = "tensorboard"  # RUN/tensorboard: `tensorboard --logdir RUN` (or a folder of runs)


def report_sinks(report_to) -> list[str]:
    """train.report_to -> the sinks to write besides metrics.jsonl. 'auto': tensorboard when it imports, else none
    (a notice); a sink asked for by name that is not installed is an error, before any work starts."""
    names = _sink_names(report_to)
    unknown = sorted(set(names) - {*REPORT_SINKS, "auto", "none"})
    if unknown:
        raise SystemExit(f"train.report_to: unknown {', '.join(unknown)} (use tensorboard, wandb, none or auto)")
    sinks = []
    for name in names:
        if name == "auto":
            name = "tensorboard" if _installed("tensorboard") else None
        if name in REPORT_SINKS and name not in sinks:
            if not _installed(name):
                raise SystemExit(f"train.report_to {name}: the {name} package is not installed "
                                 f"(pip install {name}, or --train.report_to none)")
            sinks.append(name)
    return sinks


def _sink_names(report_to) -> list[str]:
    return [str(n).strip().lower() for n in ([report_to] if isinstance(report_to, str) else report_to)]


def _installed(sink: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(sink) is not None  # torch.utils.tensorboard needs the tensorboard package


class MetricsLog:
    """One greppable line per logging step on rank 0, and the same numbers in metrics.jsonl and in the
    sinks of train.report_to: TensorBoard event files (RUN/tensorboard), W&B. In a sink, each numeric
    field of a row is a scalar ``SPLIT/FIELD`` (``train/loss``, ``validation/el_acc``) at the row's step."""

    def __init__(self, run_dir: Path, enabled: bool, report_to=("none",), config: dict | None = None):
        self.enabled = enabled
        self.path = run_dir / "metrics.jsonl"
        self.samples_path = run_dir / "samples.jsonl"
        self.run_dir, self.config = run_dir, config or {}
        self.sinks = report_sinks(report_to)
        if enabled and "auto" in _sink_names(report_to) and not self.sinks:
            print("[pretrain] metrics: metrics.jsonl and loss.png only (pip install tensorboard for event files)",
                  flush=True)
        self.tensorboard = self.wandb = None
        self.purge_step = None  # on resume: TensorBoard hides the rows of the lost steps after the checkpoint

    def _open_sinks(self) -> None:
        if "tensorboard" in self.sinks and self.tensorboard is None:
            from torch.utils.tensorboard import SummaryWriter

            self.tensorboard = SummaryWriter(str(self.run_dir / TENSORBOARD_DIR), purge_step=self.purge_step)
        if "wandb" in self.sinks and self.wandb is None:
            import wandb

            self.wandb = wandb.init(dir=str(self.run_dir), name=self.run_dir.name, config=self.config, resume="allow")

    def write(self, record: dict) -> None:
        if not self.enabled:
            return
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")
        fields = [f"step {record['step']}"]
        for key, fmt in (("loss", ".4f"), ("lm_loss", ".4f"), ("el_loss", ".4f"), ("el_acc", ".3f"),
                         ("el_acc_enc", ".3f"), ("lr", ".2e"), ("grad_norm", ".3f"), ("lm_grad_norm", ".3f"),
                         ("el_grad_norm", ".3f"), ("tokens_per_s", ".0f"),
                         ("mfu", ".3f"), ("data_wait_frac", ".3f"), ("memory_comm_bytes", ".3g"),
                         ("dropped_mentions", "d")):
            if record.get(key) is not None:
                fields.append(f"{key} {record[key]:{fmt}}")
        print(f"[{record.get('split', 'train')}] " + " | ".join(fields), flush=True)
        if self.sinks:
            self._write_sinks(record)

    def _write_sinks(self, record: dict) -> None:
        self._open_sinks()
        split, step = record.get("split", "train"), record["step"]
        scalars = {f"{split}/{k}": v for k, v in record.items()
                   if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)}
        if self.tensorboard is not None:
            for tag, value in scalars.items():
                self.tensorboard.add_scalar(tag, value, step)
            self.tensorboard.flush()  # a killed run keeps every row it logged, as metrics.jsonl does
        if self.wandb is not None:
            self.wandb.log(scalars, step=step)

    def close(self) -> None:
        if self.tensorboard is not None:
            self.tensorboard.close()
        if self.wandb is not None:
            self.wandb.finish()
        self.tensorboard = self.wandb = None

    def forget_after(self, step: int) -> None:
        """On resume from ``step``: keep only the rows up to it (and drop a line torn by a kill)."""
        if not self.enabled:
            return
        self.purge_step = step + 1
        for path in (self.path, self.samples_path):
            if path.exists():
                kept = [r for r in read_metrics(path) if r["step"] <= step]
                tmp = path.with_suffix(".jsonl.tmp")
                tmp.write_text("".join(json.dumps(r) + "\n" for r in kept))
                tmp.replace(path)

    def write_samples(self, step: int, sample_indices: list, passage_ids: list) -> None:
        if self.enabled:
            with open(self.samples_path, "a") as f:
                f.write(json.dumps({"step": step, "sample_indices": sample_indices, "passage_ids": passage_ids}) + "\n")


def read_metrics(path: Path) -> list[dict]:
    """Rows of a metrics/samples JSONL file; a last line torn by a killed run is skipped."""
    rows = []
    lines = Path(path).read_text().splitlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if i != len(lines) - 1:
                raise
    return rows


def plot_losses(run_dir: Path) -> Path | None:
    """loss.png from metrics.jsonl: train (and validation) total, LM and EL losses."""
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_metrics(path)
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for split, style in (("train", "-"), ("validation", "o--")):
        r = [x for x in rows if x.get("split", "train") == split]
        if not r:
            continue
        for ax, key in zip(axes, ("loss", "lm_loss", "el_loss")):
            ax.plot([x["step"] for x in r], [x[key] for x in r], style, label=split)
            ax.set_title(key), ax.set_xlabel("step")
    axes[0].legend()
    fig.tight_layout()
    out = run_dir / "loss.png"
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


class Timer:
    def __init__(self):
        self.t = time.perf_counter()

    def lap(self) -> float:
        now = time.perf_counter()
        dt, self.t = now - self.t, now
        return dt
