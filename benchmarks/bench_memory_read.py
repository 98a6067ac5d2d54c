"""One memory read, forward + backward, three ways in one process: the Triton kernels (a tile sweep),
FlexAttention over the chunked table, and the float32 blocked path; each with its error against float64.

    python benchmarks/bench_memory_read.py [--mentions 768] [--entities 1048576] [--dim 256] --json FILE
                                           [--budget_s 100] [--repeat 5]

The read is EntitySoftmax as the model calls it (trainer.entity_softmax.blocked_entity_softmax with
kernel=...): lse, read, target score and top1 forward, the gradients of the queries and of the table
(float32, as the row-partitioned memory keeps it) backward, of sum(w_lse lse + w_score score + w_read . read).
The reference is the blocked path in float64 on the same device. Timed with CUDA events (on CPU the wall
clock): a warm-up call (which compiles), then ``--repeat`` calls, median; fresh random inputs for the errors.

The JSON is rewritten after every variant (a timeout loses only the variant running), with, per variant:
median and all times (ms), relative errors ||x - ref|| / ||ref|| of lse, read, grad_query, grad_rows, the
matrix products it does (M x N x D multiply-adds each) and, for the kernels, each tile's registers and
spills as compiled. ``--budget_s`` stops the tile sweep (not the three first variants) once spent.
benchmarks/gpu_check_report.py turns it into the decision: the kernels stay the CUDA path only if their best
tile is >= 1.25x faster than FlexAttention and both meet the tolerances.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from step_timing import sync, times_ms  # noqa: E402

from trainer import entity_softmax as es  # noqa: E402

# products per read (fwd + bwd), in M x N x D multiply-adds: what each path does as written
PRODUCTS = {"triton": 9, "flex": 10, "blocked_fp32": 7, "flex_attention_only": 7}
TOLERANCE = {"lse": 5e-4, "read": 1e-2, "grad_query": 1e-2, "grad_rows": 1e-2}  # trainer/entity_kernels.py


def problem(m: int, n: int, d: int, seed: int, device):
    g = torch.Generator(device=device).manual_seed(seed)
    q = torch.randn(m, d, generator=g, device=device)
    table = torch.randn(n, d, generator=g, device=device) * d ** -0.5
    targets = torch.randint(0, n, (m,), generator=g, device=device)
    weights = (torch.randn(m, generator=g, device=device), torch.randn(m, d, generator=g, device=device) * d ** -0.5,
               torch.randn(m, generator=g, device=device))
    return q, table, targets, weights


def read_once(kernel: str, q, table, targets, weights, block: int):
    """Forward + backward of one read -> (lse, read, grad_query, grad_rows)."""
    w_lse, w_read, w_score = weights
    qq, tt = q.detach().clone().requires_grad_(), table.detach().clone().requires_grad_()
    lse, read, _, score = es.blocked_entity_softmax(qq, tt, block, targets, True, kernel=kernel)
    loss = (w_lse.to(lse.dtype) * lse + w_score.to(lse.dtype) * score).sum() + (w_read.to(read.dtype) * read).sum()
    grad_q, grad_rows = torch.autograd.grad(loss, (qq, tt))
    return lse.detach(), read.detach(), grad_q, grad_rows


def _rel(x, ref) -> float:
    return float((x.double() - ref).norm() / ref.norm())


def measure(name: str, kernel: str, prob, ref, block: int, repeat: int, device, setup=None) -> dict:
    """Warm-up (compiles), errors against ref, then the timing. A backend that fell back is reported so."""
    es._FAILED.clear()
    t0 = time.perf_counter()
    res: dict = {"kernel": kernel}
    try:
        if setup:
            setup()
        out = read_once(kernel, *prob, block)
        sync(device)
        res["first_call_s"] = time.perf_counter() - t0  # compilation included
        if kernel in es._FAILED:
            return {**res, "status": "fell back", "why": es._FAILED[kernel]}
        res["errors"] = {k: _rel(x, r) for k, x, r in zip(("lse", "read", "grad_query", "grad_rows"), out, ref)}
        res["within_tolerance"] = all(res["errors"][k] < tol for k, tol in TOLERANCE.items())
        del out
        times = times_ms(lambda: read_once(kernel, *prob, block), repeat, device)
        res.update(status="ok", ms=statistics.median(times), times_ms=times)
    except Exception as exc:  # noqa: BLE001 - recorded, the next variant runs
        res.update(status="failed", why=f"{type(exc).__name__}: {exc}"[:2000])
    finally:
        es._FAILED.clear()
    print(f"bench_memory_read: {name}: {res.get('status')} {res.get('ms', float('nan')):.2f} ms "
          f"errors {res.get('errors')}", flush=True)
    return res


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mentions", type=int, default=768)
    ap.add_argument("--entities", type=int, default=1_048_576)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--block", type=int, default=65536, help="rows per block of the blocked path")
    ap.add_argument("--repeat", type=int, default=5, help="timed calls per variant (median)")
    ap.add_argument("--budget_s", type=float, default=100.0, help="no further tile once this much time is spent")
    ap.add_argument("--chunks", default="8192", help="FlexAttention rows per chunk, comma-separated (each compiles)")
    ap.add_argument("--json", type=Path, required=True)
    a = ap.parse_args(argv)
    t_start = time.perf_counter()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    m, n, d = a.mentions, a.entities, a.dim
    result = {"device": torch.cuda.get_device_name() if device.type == "cuda" else f"CPU ({platform.processor()})",
              "torch": torch.__version__, "mentions": m, "entities": n, "dim": d, "repeat": a.repeat,
              "products": PRODUCTS, "multiply_adds_per_product": m * n * d, "tolerance": TOLERANCE, "variants": {}}

    def save():
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(result, indent=1))

    prob = problem(m, n, d, seed=0, device=device)
    t = time.perf_counter()
    q, table, targets, weights = prob
    ref = read_once("blocked", q.double(), table.double(), targets, tuple(w.double() for w in weights), a.block)
    sync(device)
    result["reference_float64_s"] = time.perf_counter() - t
    save()
    variants = result["variants"]
    variants["blocked_fp32"] = measure("blocked_fp32", "blocked", prob, ref, a.block, a.repeat, device)
    save()
    if device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        # the kernels and FlexAttention need CUDA; under TRITON_INTERPRET=1 (tests) the sweep's code runs too
        result["note"] = "no CUDA: only the blocked path ran"
        save()
        return result
    from trainer import entity_flex, entity_kernels

    tiles = {kind: list(cfgs) for kind, cfgs in entity_kernels.TILES.items()}
    sweep = max(len(c) for c in tiles.values())

    def use_tile(i):
        def setup():
            entity_kernels.TILES.update({kind: [cfgs[min(i, len(cfgs) - 1)]] for kind, cfgs in tiles.items()})
            entity_kernels._working.clear()
        return setup

    def triton_variant(i):
        name = f"triton_tile{i}"
        variants[name] = measure(name, "triton", prob, ref, a.block, a.repeat, device, use_tile(i))
        variants[name]["tiles"] = {kind: cfgs[min(i, len(cfgs) - 1)] for kind, cfgs in tiles.items()}
        variants[name]["compiled"] = {"/".join(map(str, k)): v for k, v in entity_kernels._compiled.items()}
        entity_kernels._compiled.clear()
        save()

    try:
        triton_variant(0)
        for chunk in [int(c) for c in a.chunks.split(",") if c]:
            entity_flex.CHUNK_ROWS = chunk
            variants[f"flex_chunk{chunk}"] = measure(f"flex_chunk{chunk}", "flex", prob, ref, a.block, a.repeat,
                                                     device)
            variants[f"flex_chunk{chunk}"]["chunk_rows"] = chunk
            save()
        # FlexAttention alone, forward + backward over the chunks (7 products): what a flex path that kept its
        # forward's graph and found the argmax elsewhere could approach. Not a candidate: a lower bound.
        try:
            chunk = entity_flex.CHUNK_ROWS
            kv = entity_flex.chunk_rows(table, torch.bfloat16, chunk).requires_grad_()
            qp = entity_flex._pad_queries(q, torch.bfloat16, entity_flex.QUERY_PAD).requires_grad_()

            def attention_only():
                read_c, lse_c = entity_flex.flex_attend(qp, kv, n)
                torch.autograd.grad((read_c, lse_c), (qp, kv), (torch.ones_like(read_c), torch.ones_like(lse_c)))

            attention_only()
            sync(device)
            times = times_ms(attention_only, a.repeat, device)
            variants["flex_attention_only"] = {"status": "ok", "ms": statistics.median(times), "times_ms": times,
                                               "note": "lower bound, not a candidate", "chunk_rows": chunk}
        except Exception as exc:  # noqa: BLE001
            variants["flex_attention_only"] = {"status": "failed", "why": f"{type(exc).__name__}: {exc}"[:2000]}
        save()
        for i in range(1, sweep):
            if time.perf_counter() - t_start > a.budget_s:
                result["sweep_stopped"] = f"budget of {a.budget_s} s spent before tile {i}"
                break
            triton_variant(i)
    finally:
        entity_kernels.TILES.update(tiles)
        save()
    return result


if __name__ == "__main__":
    main()
