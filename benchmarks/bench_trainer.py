"""Cost of EDMem's entity memory: step time and peak memory against the same BART without it,
and the peak memory of the entity-linking loss over 1M entities, dense vs blocked.

    python benchmarks/bench_trainer.py                 # CPU-sized defaults, a table
    python benchmarks/bench_trainer.py --json          # the same numbers as JSON
    python benchmarks/bench_trainer.py --preset base --entities 1000000   # on a GPU

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
VARIANTS = ("bart", "edmem", "edmem_rows", "edmem_before")
VARIANT_HELP = {
    "bart": "the same BART (L1 + L2 layers, same widths), no memory, same tied LM head and loss",
    "edmem": "EDMem, replicated table (its gradient through autograd, as under ZeRO)",
    "edmem_rows": "EDMem, the row-partitioned layout on one rank (rows stepped by their own AdamW)",
    "edmem_before": "EDMem, replicated, with the entity softmax of --before (the kernel before this change)",
}


def _batch(preset: str, n_entities: int):
    from trainer.config import ModelConfig
    from trainer.model import EDMemSpec

    p = PRESETS[preset]
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

    def call(*args, accumulate_grad=False, **kwargs):
        return module.blocked_entity_softmax(*args, **kwargs)
    return call


class _Variant:
    """One model of the comparison and its training step (forward, backward, AdamW step, zero_grad).

    Every variant uses torch's fused AdamW (on CPU too: ~9x faster than the default for-loop one
    here, for BART and EDMem alike); ``set_to_none=False`` keeps gradients allocated, the steady state.
    """

    def __init__(self, name: str, spec, batch, dtype: str, before_rev: str):
        import trainer.model as model_module
        from trainer.model import EDMem, bart_config

        self.name, self.dev = name, _device()
        self.amp = lambda: torch.autocast(self.dev.type, dtype=torch.bfloat16, enabled=dtype == "bf16")
        self.rows = None
        self.patch = None
        if name == "bart":
            from transformers import BartModel

            model = BartModel(bart_config(spec)).to(self.dev)

            def loss_fn():
                h = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                          decoder_input_ids=batch["decoder_input_ids"]).last_hidden_state
                logits = F.linear(h.reshape(-1, h.shape[-1]), model.shared.weight)
                return F.cross_entropy(logits.float(), batch["labels"].reshape(-1))
        else:
            model = EDMem(spec, memory_partition="rows" if name == "edmem_rows" else "replicated").to(self.dev)
            if name == "edmem_rows":
                self.rows = model.make_rows(device=self.dev)
                self.rows.make_optimizer(1e-4, (0.9, 0.999), 1e-8, 0.0, lambda step: 1.0, fused=True)
            if name == "edmem_before":
                self.patch = (model_module, _old_softmax(before_rev))

            def loss_fn():
                return model(**batch)["loss"]
        self.model, self.loss_fn = model, loss_fn
        self.opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
        self.params = sum(p.numel() for p in model.parameters()) + (self.rows.weight.numel() if self.rows else 0)

    def step(self) -> None:
        from torch.profiler import record_function

        saved = None
        if self.patch:
            module, fn = self.patch
            saved, module.blocked_entity_softmax = module.blocked_entity_softmax, fn
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
                self.patch[0].blocked_entity_softmax = saved


def worker_model(variant: str, preset: str, n_entities: int, repeats: int, dtype: str, before_rev: str) -> dict:
    """Peak memory of one variant in a process of its own (weights, gradients, Adam states, activations)."""
    spec, batch = _batch(preset, n_entities)
    peak = _Peak().__enter__()
    v = _Variant(variant, spec, batch, dtype, before_rev)
    for _ in range(1 + repeats):  # the first allocates gradients and Adam states
        v.step()
    _sync()
    peak.__exit__(None, None, None)
    return {"variant": variant, "params": v.params, "peak_bytes": peak.peak}


def worker_timing(variants: list[str], preset: str, n_entities: int, rounds: int, dtype: str, before_rev: str,
                  threads: int, profile_steps: int) -> dict:
    """All variants in one process, stepped in turn (the order rotates every round), so that the load of a
    shared machine falls on all of them alike; wall and CPU (process) time of every step."""
    if threads:
        torch.set_num_threads(threads)
    spec, batch = _batch(preset, n_entities)
    built = {name: _Variant(name, spec, batch, dtype, before_rev) for name in variants}
    for v in built.values():
        v.step()  # warm-up: gradients, Adam states
    wall = {name: [] for name in variants}
    cpu = {name: [] for name in variants}
    for r in range(rounds):
        order = variants[r % len(variants):] + variants[:r % len(variants)]
        for name in order:
            _sync()
            t, c = time.perf_counter(), time.process_time()
            built[name].step()
            _sync()
            wall[name].append(time.perf_counter() - t)
            cpu[name].append(time.process_time() - c)
    out = {"threads": torch.get_num_threads(), "rounds": rounds, "variants": {}}
    for name in variants:
        res = {"params": built[name].params, "step_s": statistics.median(wall[name]), "step_s_all": wall[name],
               "cpu_s": statistics.median(cpu[name]), "cpu_s_all": cpu[name]}
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

    times = []
    with _Peak() as peak:
        for _ in range(repeats + 1):
            _sync()
            t = time.perf_counter()
            run()
            _sync()
            times.append(time.perf_counter() - t)
    table_grad = n_entities * entity_dim * 4  # the [N, D] gradient every variant returns once per backward
    return {"variant": variant, "time_s": statistics.median(times[1:]), "peak_bytes": peak.peak,
            "peak_bytes_without_table_grad": peak.peak - table_grad, "dense_scores_bytes": mentions * n_entities * 4}


# ----------------------------------------------------------------------------- FLOP count


def matmul_flops(d_model: int, ffn_dim: int, layers_per_stack: int, seq_len: int, batch: int, mentions: int,
                 n_entities: int, entity_dim: int, vocab: int = VOCAB) -> dict:
    """Multiply-add FLOPs (x2) of one training step (forward + backward = 3 x forward for the transformer),
    counting matrix products only: what bounds the EDMem/BART ratio when both run at the same efficiency.

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
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="bf16" if torch.cuda.is_available() else "fp32")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    ap.add_argument("--out", default=None, help="also write the JSON object to this file")
    ap.add_argument("--skip", choices=["model", "el"], action="append", default=[])
    ap.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        kind, *rest = a.worker
        if kind == "model":
            res = worker_model(rest[0], rest[1], int(rest[2]), int(rest[3]), rest[4], rest[5])
        elif kind == "timing":
            res = worker_timing(rest[0].split(","), rest[1], int(rest[2]), int(rest[3]), rest[4], rest[5],
                                int(rest[6]), int(rest[7]))
        else:
            res = worker_el(rest[0], int(rest[1]), int(rest[2]), int(rest[3]), int(rest[4]), int(rest[5]))
        print(json.dumps(res))
        return

    gpu = torch.cuda.is_available()
    n_entities = a.entities or (1_000_000 if gpu else 100_000)
    el_mentions = a.el_mentions or (2048 if gpu else 256)
    device = torch.cuda.get_device_name() if gpu else f"CPU ({os.cpu_count()} cores, {torch.get_num_threads()} threads)"
    result = {"device": device, "preset": a.preset, "dtype": a.dtype, "repeats": a.repeats}
    gib = lambda b: f"{b / 2**30:.3f} GiB"  # noqa: E731
    variants = [v for v in a.variants.split(",") if v]
    if unknown := set(variants) - set(VARIANTS):
        raise SystemExit(f"unknown variants {sorted(unknown)}; known: {VARIANTS}")
    if "model" not in a.skip:
        p = PRESETS[a.preset]
        timing = _spawn(["timing", ",".join(variants), a.preset, str(n_entities), str(a.repeats), a.dtype, a.before,
                         str(a.threads), str(a.profile_steps)])
        peaks = {v: _spawn(["model", v, a.preset, str(n_entities), "1", a.dtype, a.before]) for v in variants}
        model = {"entities": n_entities, **p, "before_rev": a.before, "threads": timing["threads"],
                 "rounds": timing["rounds"]}
        for v in variants:
            model[v] = {**timing["variants"][v], "peak_bytes": peaks[v]["peak_bytes"]}
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
    if a.json:
        print(json.dumps(result, indent=2))
        return
    print(f"device: {device}   preset: {a.preset}   dtype: {a.dtype}   medians of {a.repeats}")
    if "model" in result:
        r = result["model"]
        print(f"\nEDMem vs the same BART without memory ({r['entities']:,} entities x {r['entity_dim']}, batch "
              f"{r['batch']} x {r['seq_len']}, {r['mentions']} mentions/sequence; {r['threads']} threads, "
              f"{r['rounds']} rounds, variants in turn; ratios are medians of per-round ratios)")
        print(f"{'variant':<14}{'params':>12}{'step (s)':>10}{'CPU (s)':>10}{'ratio':>8}{'CPU ratio':>11}"
              f"{'peak memory':>14}")
        for name in variants:
            x = r[name]
            print(f"{name:<14}{x['params']:>12,}{x['step_s']:>10.3f}{x['cpu_s']:>10.3f}"
                  f"{x.get('step_time_ratio', 1.0):>8.2f}{x.get('cpu_time_ratio', 1.0):>11.2f}"
                  f"{gib(x['peak_bytes']):>14}")
        for name, prof in r.get("profile", {}).items():
            if "difference_from_bart" in prof:
                d = prof["difference_from_bart"]
                print(f"{name} - bart, profiled ({prof['whole_step']:.3f} vs {r['profile']['bart']['whole_step']:.3f}"
                      f" s per step, {d['total']:+.3f} s): reads' forward {d['memory_reads_forward']:.3f}, their "
                      f"backward {d['memory_reads_backward']:.3f}, read sites' rest {d['read_sites_rest_forward']:.3f},"
                      f" optimizer {d['optimizer']:+.3f}, everything else {d['everything_else']:+.3f}")
        for where, f in r["flops"].items():
            print(f"matmul FLOPs, {where.replace('_', ' ')}: BART {f['bart'] / 1e9:.1f} G, memory "
                  f"{f['memory'] / 1e9:.1f} G: EDMem/BART >= x{f['ratio_bound']:.2f} at equal efficiency "
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


if __name__ == "__main__":
    main()
