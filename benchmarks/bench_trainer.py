"""Cost of EDMem's entity memory: step time, MFU and peak memory against the same BART without it;
the peak memory of the entity-linking loss over 1M entities, dense vs blocked; and that of the LM
loss over a 50,265-token vocabulary, dense logits vs trainer.lm_loss's chunks.

    python benchmarks/bench_trainer.py                 # CPU-sized defaults, a table
    python benchmarks/bench_trainer.py --json          # the same numbers as JSON
    python benchmarks/bench_trainer.py --preset base --entities 1000000   # on a GPU: bf16 weights, compiled
    python benchmarks/bench_trainer.py --preset base --batch 128 --bf16 true --compile true --variants bart,edmem

On a GPU every variant also gets its MFU: the model FLOPs of trainer.metrics.flops_per_step (the
trainer's own formula) over the measured step time and trainer.metrics.peak_flops of the device.
``--bf16 true`` puts the weights in bf16 as the trainer's DeepSpeed bf16 does (no autocast; the
optimizer here steps the bf16 weights directly, without DeepSpeed's float32 masters); ``--compile
true`` compiles every transformer layer of BART and EDMem alike (trainer.speed.compile_layers).

Step times: all variants (BART, EDMem with a replicated table, EDMem with its rows layout,
and EDMem with the entity softmax of ``--before``) live in one process and are stepped in
turn, the order rotating each round, after one warm-up step each; ratios are medians of the
per-round ratios to BART, in wall and in CPU (process) time, so the load of a shared machine
falls on all alike. A torch.profiler pass then splits each EDMem variant's difference from
BART (memory reads forward / backward, read sites, optimizer, the rest), and an analytic
count of matmul FLOPs gives the ratio both would have at equal efficiency.

Peak memory: each variant, and each EL-loss measurement, in its own subprocess: on a GPU
torch.cuda.max_memory_allocated, on CPU the growth of the peak resident set (ru_maxrss)
over the resident set before the measured work.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

PRESETS = {
    # name: d_model, heads, ffn, lower, upper, entity_dim, batch, seq_len, mentions per sequence
    "small": dict(d_model=256, attention_heads=4, ffn_dim=1024, lower_layers=2, upper_layers=2, entity_dim=128,
                  batch=8, seq_len=128, mentions=8),
    "base": dict(d_model=1024, attention_heads=16, ffn_dim=4096, lower_layers=4, upper_layers=8, entity_dim=256,
                 batch=16, seq_len=160, mentions=12),
}
VOCAB = 50265  # GPT-2 BPE + <pad> <s> </s> <mask> [Es] [Ee] (+2 spare)


def _device():
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class _Peak:
    """Peak memory of the work inside the block, above what was allocated before it."""

    def __enter__(self):
        self.device = _device()
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
        else:
            self.base = _rss_bytes()
        return self

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            self.peak = torch.cuda.max_memory_allocated() - self.base
        else:
            self.peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - self.base


def _sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


# ----------------------------------------------------------------------------- workers

# The last commit before the fused backward (ISSUE 11's "x1.6-1.8" state): `--before` loads its
# trainer/entity_softmax.py from git, so before and after are timed side by side in one run.
BEFORE_REV = "8816d9c"
VARIANTS = ("bart", "edmem", "edmem_rows", "edmem_before", "edmem_dense_lm")
VARIANT_HELP = {
    "bart": "the same BART (L1 + L2 layers, same widths), no memory, same tied LM head and loss",
    "edmem": "EDMem, replicated table (its gradient through autograd, as under ZeRO)",
    "edmem_rows": "EDMem, the row-partitioned layout on one rank (rows stepped by their own AdamW)",
    "edmem_before": "EDMem, replicated, with the entity softmax of --before (the kernel before this change)",
    "edmem_dense_lm": "EDMem, replicated, with the dense LM loss (F.linear, then F.cross_entropy of float32 logits) "
                      "instead of trainer.lm_loss's chunks",
}


def _dense_lm_loss(hidden, weight, labels, chunk_size=None, ignore_index=-100, with_correct=False):
    """trainer.lm_loss.linear_cross_entropy's signature over the whole logit matrix (edmem_dense_lm)."""
    loss = F.cross_entropy(F.linear(hidden, weight).float(), labels, ignore_index=ignore_index, reduction="sum")
    return loss, None


def _preset(preset: str, overrides: str = "") -> dict:
    """The preset's geometry with ``batch=128,seq_len=160`` style overrides (the command line's batch flags)."""
    p = dict(PRESETS[preset])
    for item in filter(None, overrides.split(",")):
        key, value = item.split("=")
        p[key] = int(value)
    return p


def _batch(preset: str, n_entities: int, overrides: str = ""):
    from trainer.config import ModelConfig
    from trainer.model import EDMemSpec

    p = _preset(preset, overrides)
    m = ModelConfig(**{k: p[k] for k in ("d_model", "attention_heads", "ffn_dim", "lower_layers", "upper_layers",
                                         "entity_dim")}, max_positions=256, dropout=0.0)
    pad, es, ee, eos = VOCAB - 6, VOCAB - 2, VOCAB - 1, VOCAB - 4
    spec = EDMemSpec(m, VOCAB, n_entities, pad, es, eos)
    torch.manual_seed(0)
    B, S, M = p["batch"], p["seq_len"], p["mentions"]
    ids = torch.randint(0, 50000, (B, S))
    for j in range(M):  # M mentions per sequence, [Es] x x [Ee]
        pos = 2 + j * (S - 4) // M
        ids[:, pos], ids[:, pos + 3] = es, ee
    entity_ids = torch.zeros(B, S, dtype=torch.long)
    entity_ids[ids == es] = torch.randint(3, n_entities, (int((ids == es).sum()),))
    shift = lambda t: torch.cat([torch.full_like(t[:, :1], 0), t[:, :-1]], 1)  # noqa: E731
    batch = dict(input_ids=ids, attention_mask=torch.ones(B, S, dtype=torch.bool), decoder_input_ids=shift(ids),
                 labels=ids.clone(), entity_ids=entity_ids, decoder_entity_ids=shift(entity_ids))
    return spec, {k: v.to(_device()) for k, v in batch.items()}


def _old_softmax(rev: str):
    """blocked_entity_softmax as it was at ``rev`` (a module loaded from git), with today's call signature."""
    import importlib.util
    import tempfile

    root = Path(__file__).resolve().parent.parent
    src = subprocess.run(["git", "-C", str(root), "show", f"{rev}:trainer/entity_softmax.py"], check=True,
                         capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / f"entity_softmax_{rev}.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def call(*args, accumulate_grad=False, kernel="blocked", **kwargs):  # options the old code did not have
        return module.blocked_entity_softmax(*args, **kwargs)
    return call


class _Variant:
    """One model of the comparison and its training step (forward, backward, AdamW step, zero_grad).

    Every variant uses torch's fused AdamW (on CPU too: ~9x faster than the default for-loop one
    here, for BART and EDMem alike); ``set_to_none=False`` keeps gradients allocated, the steady state.
    """

    def __init__(self, name: str, spec, batch, dtype: str, before_rev: str, bf16_weights: bool = False,
                 compiled: bool = False):
        import trainer.model as model_module
        from trainer.model import EDMem, bart_config
        from trainer.speed import compile_layers

        self.name, self.dev = name, _device()
        autocast = dtype == "bf16" and not bf16_weights
        self.amp = lambda: torch.autocast(self.dev.type, dtype=torch.bfloat16, enabled=autocast)
        self.rows = None
        self.patch = None
        if name == "bart":
            from transformers import BartModel

            model = BartModel(bart_config(spec)).to(self.dev)
            if bf16_weights:
                model.to(torch.bfloat16)
            if compiled:
                for layer in [*model.encoder.layers, *model.decoder.layers]:
                    layer.compile(dynamic=False)

            def loss_fn():
                h = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                          decoder_input_ids=batch["decoder_input_ids"]).last_hidden_state
                logits = F.linear(h.reshape(-1, h.shape[-1]), model.shared.weight)
                return F.cross_entropy(logits.float(), batch["labels"].reshape(-1))
        else:
            model = EDMem(spec, memory_partition="rows" if name == "edmem_rows" else "replicated").to(self.dev)
            if bf16_weights:  # the rows (edmem_rows) stay float32, as in the trainer
                model.to(torch.bfloat16)
            if compiled:
                compile_layers(model)
            if name == "edmem_rows":
                self.rows = model.make_rows(device=self.dev)
                self.rows.make_optimizer(1e-4, (0.9, 0.999), 1e-8, 0.0, lambda step: 1.0, fused=True)
            if name == "edmem_before":
                self.patch = (model_module, "blocked_entity_softmax", _old_softmax(before_rev))
            if name == "edmem_dense_lm":
                self.patch = (model_module, "linear_cross_entropy", _dense_lm_loss)

            def loss_fn():
                return model(**batch)["loss"]
        self.model, self.loss_fn = model, loss_fn
        self.flops = _model_flops(name, model, spec, batch)
        self.opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
        self.params = sum(p.numel() for p in model.parameters()) + (self.rows.weight.numel() if self.rows else 0)

    def step(self) -> None:
        from torch.profiler import record_function

        saved = None
        if self.patch:
            module, attribute, fn = self.patch
            saved = getattr(module, attribute)
            setattr(module, attribute, fn)
        try:
            with record_function("step_forward"), self.amp():
                loss = self.loss_fn()
            with record_function("step_backward"):
                loss.backward()
            with record_function("step_optimizer"):
                self.opt.step()
                self.opt.zero_grad(set_to_none=False)
                if self.rows is not None:
                    self.rows.step(clip=0.0)
        finally:
            if saved is not None:
                setattr(self.patch[0], self.patch[1], saved)


def _model_flops(name: str, model, spec, batch) -> float:
    """Model FLOPs of one step by trainer.metrics.flops_per_step, as the trainer counts them for its MFU:
    encoder + decoder tokens through the non-embedding weights, the LM head on the target tokens, and for
    EDMem the three reads of the [Es] positions (BART: no memory term)."""
    from trainer.metrics import flops_per_step

    d, vocab = spec.model.d_model, spec.vocab_size
    params = {id(p): p.numel() for p in model.parameters()}  # tied weights once
    non_embedding = sum(params.values()) - vocab * d
    mentions, n_entities = 0, 0
    if name != "bart":
        non_embedding -= spec.n_entities * spec.model.entity_dim if name != "edmem_rows" else 0
        mentions, n_entities = int((batch["input_ids"] == spec.entity_start_token_id).sum()), spec.n_entities
    input_tokens = float(batch["attention_mask"].sum()) + float(batch["labels"].ne(-100).sum())
    return flops_per_step(non_embedding, d, vocab, spec.model.entity_dim, n_entities, input_tokens,
                          float(batch["labels"].ne(-100).sum()), mentions)


def worker_model(variant: str, preset: str, n_entities: int, repeats: int, dtype: str, before_rev: str,
                 bf16_weights: bool = False, compiled: bool = False, overrides: str = "") -> dict:
    """Peak memory of one variant in a process of its own (weights, gradients, Adam states, activations)."""
    spec, batch = _batch(preset, n_entities, overrides)
    peak = _Peak().__enter__()
    v = _Variant(variant, spec, batch, dtype, before_rev, bf16_weights, compiled)
    for _ in range(1 + repeats):  # the first allocates gradients and Adam states
        v.step()
    _sync()
    peak.__exit__(None, None, None)
    return {"variant": variant, "params": v.params, "peak_bytes": peak.peak}


def worker_timing(variants: list[str], preset: str, n_entities: int, rounds: int, dtype: str, before_rev: str,
                  threads: int, profile_steps: int, bf16_weights: bool = False, compiled: bool = False,
                  overrides: str = "", peak_tflops: float = 0.0) -> dict:
    """All variants in one process, stepped in turn (the order rotates every round), so that the load of a
    shared machine falls on all of them alike; wall and CPU (process) time of every step."""
    from trainer.metrics import peak_flops

    if threads:
        torch.set_num_threads(threads)
    spec, batch = _batch(preset, n_entities, overrides)
    built = {name: _Variant(name, spec, batch, dtype, before_rev, bf16_weights, compiled) for name in variants}
    for v in built.values():
        v.step()  # warm-up: gradients, Adam states (and, compiled, the graphs)
        if compiled:
            v.step()
    wall = {name: [] for name in variants}
    step_peak, step_peak_whole = {}, {}
    cpu = {name: [] for name in variants}
    for r in range(rounds):
        order = variants[r % len(variants):] + variants[:r % len(variants)]
        for name in order:
            _sync()
            if torch.cuda.is_available():
                torch.cuda.reset_peak_memory_stats()
                resident = torch.cuda.memory_allocated()
            t, c = time.perf_counter(), time.process_time()
            built[name].step()
            _sync()
            wall[name].append(time.perf_counter() - t)
            cpu[name].append(time.process_time() - c)
            if torch.cuda.is_available():  # what the step adds above all variants' weights and states
                step_peak[name] = max(step_peak.get(name, 0), torch.cuda.max_memory_allocated() - resident)
                step_peak_whole[name] = max(step_peak_whole.get(name, 0), torch.cuda.max_memory_allocated())
    out = {"threads": torch.get_num_threads(), "rounds": rounds, "variants": {}}
    peak = peak_flops(peak_tflops)
    for name in variants:
        res = {"params": built[name].params, "step_s": statistics.median(wall[name]), "step_s_all": wall[name],
               "cpu_s": statistics.median(cpu[name]), "cpu_s_all": cpu[name], "model_flops": built[name].flops}
        res["model_tflops_per_s"] = built[name].flops / res["step_s"] / 1e12
        if peak:  # on a GPU (or with --peak_tflops): the trainer's MFU
            res["mfu"] = built[name].flops / res["step_s"] / peak
        if name in step_peak:
            res["step_peak_above_resident_bytes"] = step_peak[name]
            res["step_peak_bytes"] = step_peak_whole[name]
        if name != "bart" and "bart" in built:
            # per-round ratios: both steps of a round ran under about the same load
            res["step_time_ratio"] = statistics.median(a / b for a, b in zip(wall[name], wall["bart"]))
            res["cpu_time_ratio"] = statistics.median(a / b for a, b in zip(cpu[name], cpu["bart"]))
        out["variants"][name] = res
    if profile_steps:
        out["profile"] = _profile(built, profile_steps)
    return out


def _profile(built: dict, steps: int) -> dict:
    """Where each variant's step goes, from torch.profiler (CPU time of the ranges below, per step), and the
    difference of every EDMem variant from BART, split into: the memory reads' forward (the blocked softmax
    of the encoder, decoder and linking-head reads), their backward (its autograd node), the rest of the
    read sites and the linking head (W_in, W_out, LayerNorms, gathers and scatters), the optimizer step
    (now also over the table) and everything else (what BART also does, plus autograd's accumulation of
    the table's gradient for a replicated table)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    from trainer.model import EntityMemory, MemoryAccess

    original_read, original_site = EntityMemory.forward, MemoryAccess.forward

    def read_forward(self, query, targets, need_read=True):
        with record_function("memory_read_forward" if need_read else "head_read_forward"):
            return original_read(self, query, targets, need_read)

    def site_forward(self, *args, **kwargs):
        with record_function("read_site_forward"):
            return original_site(self, *args, **kwargs)

    KEYS = ("whole_step", "step_forward", "step_backward", "step_optimizer", "memory_read_forward",  # noqa: N806
            "head_read_forward", "read_site_forward", "memory_read_backward")
    result = {}
    EntityMemory.forward, MemoryAccess.forward = read_forward, site_forward
    try:
        for name, v in built.items():
            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
            with profile(activities=activities) as prof:
                for _ in range(steps):
                    with record_function("whole_step"):
                        v.step()
                    _sync()
            t = {}
            for e in prof.key_averages():
                key = "memory_read_backward" if "EntitySoftmaxBackward" in e.key and "evaluate_function" not in e.key \
                    else e.key
                if key in KEYS:
                    total = e.device_time_total if torch.cuda.is_available() else e.cpu_time_total
                    t[key] = t.get(key, 0.0) + total / 1e6 / steps
            result[name] = {k: t.get(k, 0.0) for k in KEYS}
    finally:
        EntityMemory.forward, MemoryAccess.forward = original_read, original_site
    if "bart" in result:
        base = result["bart"]
        for name, r in result.items():
            if name == "bart":
                continue
            r["difference_from_bart"] = diff = {
                "total": r["whole_step"] - base["whole_step"],
                "memory_reads_forward": r["memory_read_forward"] + r["head_read_forward"],
                "memory_reads_backward": r["memory_read_backward"],
                "read_sites_rest_forward": r["read_site_forward"] - r["memory_read_forward"],
                "optimizer": r["step_optimizer"] - base["step_optimizer"],
            }
            diff["everything_else"] = diff["total"] - sum(v for k, v in diff.items() if k != "total")
    return result


def _median_time_and_peak(run, repeats: int) -> tuple[float, int]:
    """``run()`` once to warm up and ``repeats`` times more: the median time of the repeats, and the peak memory
    of them all above what was allocated before."""
    times = []
    with _Peak() as peak:
        for _ in range(repeats + 1):
            _sync()
            t = time.perf_counter()
            run()
            _sync()
            times.append(time.perf_counter() - t)
    return statistics.median(times[1:]), peak.peak


def worker_el(variant: str, n_entities: int, mentions: int, entity_dim: int, block: int, repeats: int) -> dict:
    from trainer.entity_softmax import blocked_entity_softmax

    dev = _device()
    torch.manual_seed(0)
    table = torch.randn(n_entities, entity_dim, device=dev).requires_grad_()
    table.grad = torch.zeros_like(table)  # both variants need it; not part of the comparison
    q = torch.randn(mentions, entity_dim, device=dev).requires_grad_()
    q.grad = torch.zeros_like(q)
    targets = torch.randint(3, n_entities, (mentions,), device=dev)

    def el_loss():
        if variant == "dense":  # what a plain implementation does: [mentions x entities] logits
            return F.cross_entropy(q @ table.T, targets)
        lse, _, _, target_score = blocked_entity_softmax(q, table, block, targets, with_read=False)
        return (lse - target_score).mean()  # as the model's linking head computes it

    def run():
        el_loss().backward()

    time_s, peak = _median_time_and_peak(run, repeats)
    table_grad = n_entities * entity_dim * 4  # the [N, D] gradient every variant returns once per backward
    return {"variant": variant, "time_s": time_s, "peak_bytes": peak,
            "peak_bytes_without_table_grad": peak - table_grad, "dense_scores_bytes": mentions * n_entities * 4}


def worker_lm(variant: str, tokens: int, d_model: int, vocab: int, dtype: str, repeats: int) -> dict:
    """The LM head + cross-entropy + backward over ``tokens`` target tokens: dense (the [tokens x vocab] logits,
    then their float32 copy, as F.linear + F.cross_entropy(logits.float()) keep them) or trainer.lm_loss's chunks."""
    from trainer.lm_loss import linear_cross_entropy
    from trainer.model import LM_LOSS_CHUNK_TOKENS

    dev, dt = _device(), torch.bfloat16 if dtype == "bf16" else torch.float32
    torch.manual_seed(0)
    hidden = torch.randn(tokens, d_model, device=dev, dtype=dt).requires_grad_()
    weight = (torch.randn(vocab, d_model, device=dev, dtype=dt) * 0.02).requires_grad_()
    hidden.grad, weight.grad = torch.zeros_like(hidden), torch.zeros_like(weight)  # both variants return them
    labels = torch.randint(0, vocab, (tokens,), device=dev)

    def run():
        if variant == "dense":
            loss = F.cross_entropy(F.linear(hidden, weight).float(), labels, reduction="sum")
        else:
            loss, _ = linear_cross_entropy(hidden, weight, labels, LM_LOSS_CHUNK_TOKENS)
        loss.backward()

    time_s, peak = _median_time_and_peak(run, repeats)
    return {"variant": variant, "time_s": time_s, "peak_bytes": peak,
            "dense_logits_float32_bytes": tokens * vocab * 4}


# ----------------------------------------------------------------------------- FLOP count


def matmul_flops(d_model: int, ffn_dim: int, layers_per_stack: int, seq_len: int, batch: int, mentions: int,
                 n_entities: int, entity_dim: int, vocab: int = VOCAB) -> dict:
    """Multiply-add FLOPs (x2) of one training step (forward + backward = 3 x forward for the transformer),
    counting matrix products only: the EDMem/BART ratio they predict when both run at the same FLOP/s.

    Per mention the memory does, in multiples of N x D multiply-adds: a read (encoder, decoder) 2 forward
    (scores, weighted sum) + 5 backward (recomputed scores with g_r.e, query gradient, row gradient of
    both terms), the linking head 1 + 3. Without recomputation it would be 2 + 4 and 1 + 2.
    """
    d, s = d_model, seq_len
    enc_layer = 4 * d * d + 2 * d * ffn_dim + 2 * s * d  # per token: projections, FFN, attention
    dec_layer = 8 * d * d + 2 * d * ffn_dim + 4 * s * d  # + cross-attention
    per_token = layers_per_stack * (enc_layer + dec_layer) + d * vocab  # + the tied LM head
    bart = 2 * 3 * per_token * batch * s
    nd, m = n_entities * entity_dim, batch * mentions
    memory = 2 * m * nd * (7 + 7 + 4)
    floor = 2 * m * nd * (6 + 6 + 3)
    return {"bart": bart, "memory": memory, "memory_without_recompute": floor,
            "ratio_bound": (bart + memory) / bart, "ratio_bound_without_recompute": (bart + floor) / bart}


# The paper's geometry (method.md): BART-large (12 + 12 layers of d 1024), 128-token passages with
# ~12 linked mentions each (468M mentions / 39M passages), a 1M x 256 table; per-sequence ratios.
PAPER = dict(d_model=1024, ffn_dim=4096, layers_per_stack=12, seq_len=128, batch=1, mentions=12,
             n_entities=1_000_000, entity_dim=256)


# ----------------------------------------------------------------------------- driver


def _spawn(args: list[str]) -> dict:
    out = subprocess.run([sys.executable, __file__, "--worker", *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"worker {args} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), default="base" if torch.cuda.is_available() else "small")
    ap.add_argument("--entities", type=int, default=None,
                    help="entity table rows for the model comparison (default: 1M on GPU, 100k on CPU)")
    ap.add_argument("--el_entities", type=int, default=1_000_000, help="entities for the EL-loss comparison")
    ap.add_argument("--el_mentions", type=int, default=None, help="mentions in the EL-loss comparison "
                                                                   "(default: 2048 on GPU, 256 on CPU)")
    ap.add_argument("--entity_dim", type=int, default=256)
    ap.add_argument("--block", type=int, default=65536)
    ap.add_argument("--repeats", type=int, default=5, help="timed rounds (every variant once per round)")
    ap.add_argument("--variants", default="bart,edmem,edmem_rows,edmem_before",
                    help="comma-separated, from: " + "; ".join(f"{k}: {v}" for k, v in VARIANT_HELP.items()))
    ap.add_argument("--before", default=BEFORE_REV, help="git revision whose entity softmax edmem_before uses")
    ap.add_argument("--threads", type=int, default=0, help="torch threads for the timing (0: torch's default)")
    ap.add_argument("--profile_steps", type=int, default=2, help="profiled steps per variant (0: no profile)")
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="bf16" if torch.cuda.is_available() else "fp32",
                    help="autocast dtype of the forward when the weights are float32 (--bf16 false)")
    ap.add_argument("--bf16", choices=["true", "false"], default="true" if torch.cuda.is_available() else "false",
                    help="weights in bf16, as the trainer's DeepSpeed bf16 (no autocast; default: true on a GPU)")
    ap.add_argument("--compile", choices=["true", "false"], default="true" if torch.cuda.is_available() else "false",
                    help="torch.compile every transformer layer of BART and EDMem (default: true on a GPU)")
    ap.add_argument("--batch", type=int, default=None, help="sequences per step (default: the preset's)")
    ap.add_argument("--seq_len", type=int, default=None, help="tokens per sequence (default: the preset's)")
    ap.add_argument("--mentions", type=int, default=None, help="mentions per sequence (default: the preset's)")
    ap.add_argument("--peak_tflops", type=float, default=0.0,
                    help="device peak TFLOP/s for MFU (0: trainer.metrics.peak_flops's guess from the GPU name)")
    ap.add_argument("--lm_tokens", type=int, default=None, help="target tokens in the LM-loss comparison "
                                                                "(default: 20480 = 128 x 160 on GPU, 4096 on CPU)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    ap.add_argument("--out", default=None, help="also write the JSON object to this file")
    ap.add_argument("--skip", choices=["model", "el", "lm"], action="append", default=[])
    ap.add_argument("--peak_memory", choices=["true", "false"], default="true",
                    help="measure each variant's peak memory in a process of its own (false: only the timing "
                         "process's per-step peak above the resident weights, on a GPU; saves the start-ups)")
    ap.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        kind, *rest = a.worker
        if kind == "model":
            res = worker_model(rest[0], rest[1], int(rest[2]), int(rest[3]), rest[4], rest[5], rest[6] == "true",
                               rest[7] == "true", rest[8])
        elif kind == "timing":
            res = worker_timing(rest[0].split(","), rest[1], int(rest[2]), int(rest[3]), rest[4], rest[5],
                                int(rest[6]), int(rest[7]), rest[8] == "true", rest[9] == "true", rest[10],
                                float(rest[11]))
        elif kind == "lm":
            res = worker_lm(rest[0], int(rest[1]), int(rest[2]), int(rest[3]), rest[4], int(rest[5]))
        else:
            res = worker_el(rest[0], int(rest[1]), int(rest[2]), int(rest[3]), int(rest[4]), int(rest[5]))
        print(json.dumps(res))
        return

    gpu = torch.cuda.is_available()
    n_entities = a.entities or (1_000_000 if gpu else 100_000)
    el_mentions = a.el_mentions or (2048 if gpu else 256)
    device = torch.cuda.get_device_name() if gpu else f"CPU ({os.cpu_count()} cores, {torch.get_num_threads()} threads)"
    overrides = ",".join(f"{k}={v}" for k, v in (("batch", a.batch), ("seq_len", a.seq_len), ("mentions", a.mentions))
                         if v is not None)
    result = {"device": device, "preset": a.preset, "dtype": a.dtype if a.bf16 == "false" else "bf16",
              "weights": "bf16" if a.bf16 == "true" else "fp32",
              "autocast": a.dtype == "bf16" and a.bf16 == "false", "compile": a.compile == "true",
              "repeats": a.repeats}
    gib = lambda b: f"{b / 2**30:.3f} GiB"  # noqa: E731
    variants = [v for v in a.variants.split(",") if v]
    if unknown := set(variants) - set(VARIANTS):
        raise SystemExit(f"unknown variants {sorted(unknown)}; known: {VARIANTS}")
    if "model" not in a.skip:
        p = _preset(a.preset, overrides)
        timing = _spawn(["timing", ",".join(variants), a.preset, str(n_entities), str(a.repeats), a.dtype, a.before,
                         str(a.threads), str(a.profile_steps), a.bf16, a.compile, overrides, str(a.peak_tflops)])
        peaks = {v: _spawn(["model", v, a.preset, str(n_entities), "1", a.dtype, a.before, a.bf16, a.compile,
                            overrides]) for v in variants} if a.peak_memory == "true" else {}
        model = {"entities": n_entities, **p, "before_rev": a.before, "threads": timing["threads"],
                 "rounds": timing["rounds"]}
        for v in variants:
            model[v] = dict(timing["variants"][v])
            if peaks:
                model[v]["peak_bytes"] = peaks[v]["peak_bytes"]
                if v != "bart" and "bart" in variants:
                    model[v]["peak_memory_ratio"] = peaks[v]["peak_bytes"] / max(peaks["bart"]["peak_bytes"], 1)
        if "profile" in timing:
            model["profile"] = timing["profile"]
        geometry = dict(d_model=p["d_model"], ffn_dim=p["ffn_dim"], layers_per_stack=p["lower_layers"] +
                        p["upper_layers"], seq_len=p["seq_len"], batch=p["batch"], mentions=p["mentions"],
                        n_entities=n_entities, entity_dim=p["entity_dim"])
        model["flops"] = {"this_geometry": {**geometry, **matmul_flops(**geometry)},
                          "paper_geometry": {**PAPER, **matmul_flops(**PAPER)}}
        result["model"] = model
        if a.out:  # after each section: a time limit that stops a later one keeps this one
            Path(a.out).write_text(json.dumps(result, indent=2))
    if "el" not in a.skip:
        el = {v: _spawn(["el", v, str(a.el_entities), str(el_mentions), str(a.entity_dim), str(a.block),
                         str(a.repeats)]) for v in ("dense", "blocked")}
        result["el_loss"] = {"entities": a.el_entities, "mentions": el_mentions, "entity_dim": a.entity_dim,
                             "block": a.block, **el,
                             "peak_memory_ratio_dense_over_blocked": el["dense"]["peak_bytes"] /
                             max(el["blocked"]["peak_bytes"], 1),
                             "peak_memory_ratio_without_table_grad": el["dense"]["peak_bytes_without_table_grad"] /
                             max(el["blocked"]["peak_bytes_without_table_grad"], 1),
                             "time_ratio_blocked_over_dense": el["blocked"]["time_s"] / el["dense"]["time_s"]}
        if a.out:
            Path(a.out).write_text(json.dumps(result, indent=2))
    if "lm" not in a.skip:
        lm_tokens = a.lm_tokens or (20480 if gpu else 4096)
        d_model = PRESETS[a.preset]["d_model"]
        lm_dtype = "bf16" if a.bf16 == "true" else "fp32"
        lm = {v: _spawn(["lm", v, str(lm_tokens), str(d_model), str(VOCAB), lm_dtype, str(a.repeats)])
              for v in ("dense", "chunked")}
        result["lm_loss"] = {"tokens": lm_tokens, "d_model": d_model, "vocab": VOCAB, "dtype": lm_dtype, **lm,
                             "peak_memory_ratio_dense_over_chunked": lm["dense"]["peak_bytes"] /
                             max(lm["chunked"]["peak_bytes"], 1),
                             "time_ratio_chunked_over_dense": lm["chunked"]["time_s"] / lm["dense"]["time_s"]}
    if a.out:
        Path(a.out).write_text(json.dumps(result, indent=2))
    if a.json:
        print(json.dumps(result, indent=2))
        return
    print(f"device: {device}   preset: {a.preset}   weights: {result['weights']}   autocast: {result['autocast']}   "
          f"compile: {result['compile']}   medians of {a.repeats}")
    if "model" in result:
        r = result["model"]
        print(f"\nEDMem vs the same BART without memory ({r['entities']:,} entities x {r['entity_dim']}, batch "
              f"{r['batch']} x {r['seq_len']}, {r['mentions']} mentions/sequence; {r['threads']} threads, "
              f"{r['rounds']} rounds, variants in turn; ratios are medians of per-round ratios)")
        print(f"{'variant':<14}{'params':>12}{'step (s)':>10}{'CPU (s)':>10}{'ratio':>8}{'CPU ratio':>11}"
              f"{'peak memory':>14}{'TFLOP/s':>9}{'MFU':>7}")
        for name in variants:
            x = r[name]
            mfu = f"{x['mfu']:>7.3f}" if "mfu" in x else f"{'-':>7}"
            print(f"{name:<14}{x['params']:>12,}{x['step_s']:>10.3f}{x['cpu_s']:>10.3f}"
                  f"{x.get('step_time_ratio', 1.0):>8.2f}{x.get('cpu_time_ratio', 1.0):>11.2f}"
                  f"{gib(x['peak_bytes']) if 'peak_bytes' in x else '-':>14}{x['model_tflops_per_s']:>9.3f}{mfu}")
        for name, prof in r.get("profile", {}).items():
            if "difference_from_bart" in prof:
                d = prof["difference_from_bart"]
                print(f"{name} - bart, profiled ({prof['whole_step']:.3f} vs {r['profile']['bart']['whole_step']:.3f}"
                      f" s per step, {d['total']:+.3f} s): reads' forward {d['memory_reads_forward']:.3f}, their "
                      f"backward {d['memory_reads_backward']:.3f}, read sites' rest {d['read_sites_rest_forward']:.3f},"
                      f" optimizer {d['optimizer']:+.3f}, everything else {d['everything_else']:+.3f}")
        for where, f in r["flops"].items():
            print(f"matmul FLOPs, {where.replace('_', ' ')}: BART {f['bart'] / 1e9:.1f} G, memory "
                  f"{f['memory'] / 1e9:.1f} G: EDMem/BART predicted x{f['ratio_bound']:.2f} at equal FLOP/s "
                  f"(x{f['ratio_bound_without_recompute']:.2f} without recomputing the scores)")
    if "el_loss" in result:
        r = result["el_loss"]
        print(f"\nEL loss + backward over {r['entities']:,} entities x {r['entity_dim']}, {r['mentions']} mentions "
              f"(block {r['block']})")
        print(f"{'variant':<9}{'time (s)':>10}{'peak memory':>16}{'without table grad':>20}")
        for name in ("dense", "blocked"):
            print(f"{name:<9}{r[name]['time_s']:>10.3f}{gib(r[name]['peak_bytes']):>16}"
                  f"{gib(r[name]['peak_bytes_without_table_grad']):>20}")
        print(f"dense/blocked peak memory: {r['peak_memory_ratio_dense_over_blocked']:.1f}x "
              f"({r['peak_memory_ratio_without_table_grad']:.1f}x without the table gradient);  "
              f"blocked/dense time: {r['time_ratio_blocked_over_dense']:.2f}x")

    if "lm_loss" in result:
        r = result["lm_loss"]
        print(f"\nLM head + loss + backward over {r['tokens']:,} tokens x vocabulary {r['vocab']:,} (d {r['d_model']}, "
              f"{r['dtype']})")
        print(f"{'variant':<9}{'time (s)':>10}{'peak memory':>16}")
        for name in ("dense", "chunked"):
            print(f"{name:<9}{r[name]['time_s']:>10.3f}{gib(r[name]['peak_bytes']):>16}")
        print(f"dense/chunked peak memory: {r['peak_memory_ratio_dense_over_chunked']:.1f}x;  "
              f"chunked/dense time: {r['time_ratio_chunked_over_dense']:.2f}x")


if __name__ == "__main__":
    main()
