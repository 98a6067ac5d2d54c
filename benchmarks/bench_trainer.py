"""Cost of EDMem's entity memory: step time and peak memory against the same BART without it,
and the peak memory of the entity-linking loss over 1M entities, dense vs blocked.

    python benchmarks/bench_trainer.py                 # CPU-sized defaults, a table
    python benchmarks/bench_trainer.py --json          # the same numbers as JSON
    python benchmarks/bench_trainer.py --preset base --entities 1000000   # on a GPU

Each measurement runs in its own subprocess so that peak memory is that measurement's:
on a GPU torch.cuda.max_memory_allocated, on CPU the growth of the peak resident set
(ru_maxrss) over the resident set before the measured work. Times are medians of
--repeats after one warm-up.
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


def worker_model(variant: str, preset: str, n_entities: int, repeats: int, dtype: str) -> dict:
    from trainer.config import ModelConfig
    from trainer.model import EDMem, EDMemSpec, bart_config

    p = PRESETS[preset]
    dev = _device()
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
    batch = {k: v.to(dev) for k, v in batch.items()}
    amp = torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dtype == "bf16")

    peak = _Peak().__enter__()  # everything from here: weights, gradients, Adam states, activations
    if variant == "edmem":
        model = EDMem(spec).to(dev)

        def loss_fn():
            return model(**batch)["loss"]
    else:  # the same BART (L1 + L2 layers, same heads and widths), no memory, same tied LM head and loss
        from transformers import BartModel

        model = BartModel(bart_config(spec)).to(dev)

        def loss_fn():
            h = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                      decoder_input_ids=batch["decoder_input_ids"]).last_hidden_state
            logits = F.linear(h.reshape(-1, h.shape[-1]), model.shared.weight)
            return F.cross_entropy(logits.float(), batch["labels"].reshape(-1))

    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=dev.type == "cuda")
    params = sum(p.numel() for p in model.parameters())

    def step():
        with amp:
            loss = loss_fn()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)  # keep gradients allocated: steady-state memory

    step()  # warm-up (allocates gradients and Adam states)
    times = []
    for _ in range(repeats):
        _sync()
        t = time.perf_counter()
        step()
        _sync()
        times.append(time.perf_counter() - t)
    peak.__exit__(None, None, None)
    result = {"variant": variant, "params": params, "step_s": statistics.median(times), "step_s_all": times,
              "peak_bytes": peak.peak, "tokens_per_step": 2 * B * S}
    if variant == "edmem":
        result["profile"] = _profile_edmem(model, step, repeats)
    return result


def _profile_edmem(model, step, repeats: int) -> dict:
    """Where EDMem's extra time goes, from torch.profiler over a few steps: the memory reads' forward (the
    encoder's and decoder's, and the linking head's; profiler ranges added here), their blocked-softmax
    backward (the autograd node), the rest of the two read sites (W_in, W_out, LayerNorm, scatter) and
    everything else (BART's layers, the tied LM head, the optimizer: what the baseline also does)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    from trainer.model import EntityMemory, MemoryAccess

    def read_forward(self, query, targets, need_read=True):
        with record_function("read_forward" if need_read else "head_read_forward"):
            return original_read(self, query, targets, need_read)

    def site_forward(self, *args, **kwargs):
        with record_function("site_forward"):
            return original_site(self, *args, **kwargs)

    original_read, original_site = EntityMemory.forward, MemoryAccess.forward
    EntityMemory.forward, MemoryAccess.forward = read_forward, site_forward
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    runs = max(1, min(repeats, 3))
    try:
        with profile(activities=activities) as prof:
            for _ in range(runs):
                with record_function("whole_step"):
                    step()
                _sync()
    finally:
        EntityMemory.forward, MemoryAccess.forward = original_read, original_site
    t = {}
    for e in prof.key_averages():
        name = "softmax_backward" if "EntitySoftmaxBackward" in e.key else e.key
        if name in ("whole_step", "read_forward", "head_read_forward", "site_forward", "softmax_backward"):
            total = e.device_time_total if torch.cuda.is_available() else e.cpu_time_total
            t[name] = t.get(name, 0.0) + total / 1e6 / runs
    reads_fwd = t.get("read_forward", 0.0) + t.get("head_read_forward", 0.0)
    sites_rest = max(0.0, t.get("site_forward", 0.0) - t.get("read_forward", 0.0))
    whole = t.get("whole_step", 0.0)
    return {"step_s_profiled": whole, "memory_reads_forward_s": reads_fwd,
            "memory_reads_backward_s": t.get("softmax_backward", 0.0), "read_sites_rest_forward_s": sites_rest,
            "everything_else_s": whole - reads_fwd - t.get("softmax_backward", 0.0) - sites_rest}


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
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="bf16" if torch.cuda.is_available() else "fp32")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    ap.add_argument("--out", default=None, help="also write the JSON object to this file")
    ap.add_argument("--skip", choices=["model", "el"], action="append", default=[])
    ap.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        kind, *rest = a.worker
        if kind == "model":
            res = worker_model(rest[0], rest[1], int(rest[2]), int(rest[3]), rest[4])
        else:
            res = worker_el(rest[0], int(rest[1]), int(rest[2]), int(rest[3]), int(rest[4]), int(rest[5]))
        print(json.dumps(res))
        return

    gpu = torch.cuda.is_available()
    n_entities = a.entities or (1_000_000 if gpu else 100_000)
    el_mentions = a.el_mentions or (2048 if gpu else 256)
    device = torch.cuda.get_device_name() if gpu else f"CPU ({os.cpu_count()} cores, {torch.get_num_threads()} threads)"
    result = {"device": device, "preset": a.preset, "dtype": a.dtype, "repeats": a.repeats}
    if "model" not in a.skip:
        edmem = _spawn(["model", "edmem", a.preset, str(n_entities), str(a.repeats), a.dtype])
        bart = _spawn(["model", "bart", a.preset, str(n_entities), str(a.repeats), a.dtype])
        result["model"] = {"entities": n_entities, **PRESETS[a.preset], "edmem": edmem, "bart": bart,
                           "step_time_ratio": edmem["step_s"] / bart["step_s"],
                           "peak_memory_ratio": edmem["peak_bytes"] / max(bart["peak_bytes"], 1)}
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
    gib = lambda b: f"{b / 2**30:.3f} GiB"  # noqa: E731
    print(f"device: {device}   preset: {a.preset}   dtype: {a.dtype}   medians of {a.repeats}")
    if "model" in result:
        r = result["model"]
        print(f"\nEDMem vs the same BART without memory ({r['entities']:,} entities x {a.entity_dim if a.preset == 'base' else PRESETS[a.preset]['entity_dim']}, "
              f"batch {r['batch']} x {r['seq_len']}, {r['mentions']} mentions/sequence)")
        print(f"{'model':<8}{'params':>14}{'step (s)':>12}{'peak memory':>16}   (weights+grads+Adam+activations)")
        for name in ("bart", "edmem"):
            x = r[name]
            print(f"{name:<8}{x['params']:>14,}{x['step_s']:>12.3f}{gib(x['peak_bytes']):>16}")
        print(f"{'ratio':<8}{'':>14}{r['step_time_ratio']:>12.2f}{r['peak_memory_ratio']:>16.2f}")
        prof, extra = r["edmem"]["profile"], r["edmem"]["step_s"] - r["bart"]["step_s"]
        print(f"EDMem's step, profiled ({prof['step_s_profiled']:.3f} s; {extra:+.3f} s over BART): memory reads "
              f"forward {prof['memory_reads_forward_s']:.3f} s, their backward {prof['memory_reads_backward_s']:.3f} s, "
              f"read sites' projections and norms {prof['read_sites_rest_forward_s']:.3f} s, everything else "
              f"{prof['everything_else_s']:.3f} s")
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
