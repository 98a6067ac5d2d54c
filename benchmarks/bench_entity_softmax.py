"""One entity-memory read with its EL loss, forward + backward: the blocked torch path vs the Triton kernels.

    python benchmarks/bench_entity_softmax.py --json benchmarks/results/entity_softmax_gpu.json   # on a GPU
    python benchmarks/bench_entity_softmax.py                     # on CPU: the blocked path at a small size
    python benchmarks/bench_entity_softmax.py --sweep             # also time each kernel's tile configs (GPU)

The work is the model's: M mention queries over an N x D table (``blocked_entity_softmax`` with a
target per mention and the read), loss = sum(lse - target score) + sum(w . read), gradients of the
queries and of the table (added into the table's .grad, as the row-partitioned memory does). Variants,
in one process, stepped in turn with the order rotating each round after warm-up:

    blocked_fp32        torch products over blocks of rows, float32 (TF32 off): the baseline
    blocked_tf32        the same with TF32 matmuls allowed (CUDA only)
    triton              trainer/entity_kernels.py, float32 table (bf16 products, float32 accumulation)
    triton_bf16_table   the same with the table stored in bfloat16

Times are medians over rounds of CUDA-event times (wall clock on CPU); ratios are to blocked_fp32.
TFLOP/s count the 7 products of M x N x D multiply-adds that the exact algorithm needs (2 forward,
5 backward); the kernels execute 9 (their backward recomputes the scores in two kernels), reported as
``executed_tflops``. Each variant's loss and gradients are compared with blocked_fp32's (relative error)
on the same inputs, and its peak memory above the inputs is reported (CUDA).

Floors at the defaults (an estimate from datasheet rates, not a measurement): the kernels execute
9 x 2 x 768 x 2^20 x 256 = 3.7 TFLOP of bf16 products, ~5 ms at a sustained 700 TFLOP/s on an H100/H200
(989 dense peak); they move ~5 GB (a float32 table read by each of the three kernels, its gradient read
and written), ~1 ms at 4.8 TB/s: compute-bound, so TFLOP/s is the figure to watch.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from step_timing import sync, time_ms  # noqa: E402

from trainer.entity_softmax import blocked_entity_softmax  # noqa: E402

USEFUL_PRODUCTS = 7  # forward: scores, read; backward: scores, g_r E^T, dS E, dS^T q, P^T g_r
KERNEL_PRODUCTS = 9  # the kernels' backward recomputes scores and g_r E^T in both of its kernels
SWEEP = {
    "forward": [(64, 64, 8, 2), (64, 64, 4, 2), (128, 64, 8, 2), (64, 128, 8, 2), (64, 32, 4, 3), (128, 32, 8, 2)],
    "rows": [(64, 64, 8, 2), (64, 64, 8, 1), (32, 64, 4, 2), (64, 128, 8, 1), (64, 32, 4, 2), (128, 64, 8, 1)],
    "queries": [(64, 64, 8, 2), (64, 64, 4, 2), (128, 64, 8, 2), (64, 128, 8, 2), (64, 32, 4, 3), (128, 32, 8, 2)],
}


def _problem(m: int, n: int, d: int, device, seed: int = 0):
    """Unit-variance queries, unit-norm rows (the model's initial scales), targets, a downstream weight of the read."""
    g = torch.Generator(device=device).manual_seed(seed)
    q = torch.randn(m, d, generator=g, device=device)
    table = torch.randn(n, d, generator=g, device=device) * d ** -0.5
    targets = torch.randint(0, n, (m,), generator=g, device=device)
    w_read = torch.randn(m, d, generator=g, device=device) * d ** -0.5
    return q, table, targets, w_read


class Variant:
    def __init__(self, name: str, kernel: str, table: torch.Tensor, tf32: bool = False):
        self.name, self.kernel, self.tf32 = name, kernel, tf32
        self.table = table.detach().clone().requires_grad_()
        self.times: list[float] = []

    def step(self, q, targets, w_read, block_size: int):
        """One read, forward and backward; returns (loss, grad of q); the table's gradient is added into its .grad
        (kept between steps, as in training)."""
        torch.backends.cuda.matmul.allow_tf32 = self.tf32
        q = q.detach().requires_grad_()
        lse, read, _, score = blocked_entity_softmax(q, self.table, block_size, targets, True,
                                                     accumulate_grad=True, kernel=self.kernel)
        loss = (lse - score).sum() + (w_read * read).sum()
        loss.backward()
        return loss.detach(), q.grad


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def _run(variants, q, targets, w_read, args, device) -> None:
    for v in variants:  # warm-up: compilation, autotuning of the tile configs, allocator
        for _ in range(args.warmup):
            v.step(q, targets, w_read, args.block_size)
    sync(device)
    for r in range(args.repeat):
        for v in variants[r % len(variants):] + variants[:r % len(variants)]:
            v.times.append(time_ms(lambda v=v: v.step(q, targets, w_read, args.block_size), device))


def _sweep(q, table, targets, w_read, args, device, flops: float) -> dict:
    """Each kernel's candidate tile configs in turn (the other kernels on their defaults): median ms each."""
    from trainer import entity_kernels

    out = {}
    defaults = {k: list(v) for k, v in entity_kernels.TILES.items()}
    for kind, configs in SWEEP.items():
        for config in configs:
            entity_kernels.TILES.update({k: list(v) for k, v in defaults.items()})
            entity_kernels.TILES[kind] = [config]
            entity_kernels._working.clear()
            v = Variant(f"{kind}{config}", "triton", table)
            try:
                args_short = argparse.Namespace(**{**vars(args), "repeat": max(3, args.repeat // 3)})
                _run([v], q, targets, w_read, args_short, device)
                ms = statistics.median(v.times)
                out[f"{kind} {config}"] = dict(ms=ms, useful_tflops=flops / ms / 1e9)
                print(f"  sweep {kind:8s} BLOCK_M, BLOCK_N, warps, stages = {config}: {ms:8.2f} ms", flush=True)
            except Exception as exc:  # noqa: BLE001 - a config the GPU cannot hold: say so, try the next
                out[f"{kind} {config}"] = dict(error=f"{type(exc).__name__}: {str(exc)[:200]}")
                print(f"  sweep {kind:8s} {config}: {type(exc).__name__}", flush=True)
            del v
    entity_kernels.TILES.update(defaults)
    entity_kernels._working.clear()
    return out


def main(argv=None) -> dict:
    cuda = torch.cuda.is_available()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mentions", type=int, default=768 if cuda else 64, help="M: queries (mentions) per read")
    parser.add_argument("--entities", type=int, default=1_048_576 if cuda else 16_384, help="N: rows of the table")
    parser.add_argument("--dim", type=int, default=256, help="D: entity_dim")
    parser.add_argument("--block_size", type=int, default=65536 if cuda else 16384,
                        help="rows per block of the blocked path (model.entity_block_size)")
    parser.add_argument("--repeat", type=int, default=10 if cuda else 3, help="timed rounds (median)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per variant first")
    parser.add_argument("--sweep", action="store_true", help="also time each kernel's tile configs (CUDA)")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    device = torch.device("cuda" if cuda else "cpu")
    m, n, d = args.mentions, args.entities, args.dim
    q, table, targets, w_read = _problem(m, n, d, device)
    flops = USEFUL_PRODUCTS * 2.0 * m * n * d
    machine = dict(device=torch.cuda.get_device_name() if cuda else f"CPU ({platform.processor() or 'unknown'}, "
                   f"{torch.get_num_threads()} threads)", torch=torch.__version__, host=platform.node())
    variants = [Variant("blocked_fp32", "blocked", table)]
    notes = []
    if cuda:
        variants.append(Variant("blocked_tf32", "blocked", table, tf32=True))
        try:
            import triton

            machine["triton"] = triton.__version__
            variants += [Variant("triton", "triton", table), Variant("triton_bf16_table", "triton", table.bfloat16())]
        except ImportError as exc:
            notes.append(f"triton kernels not run: {exc}")
    else:
        notes.append("the Triton kernels need CUDA: only the blocked path runs on CPU (sizes reduced)")
    print(f"{machine['device']}: M={m} mentions over N={n:,} x D={d}, one read + EL loss, forward + backward; "
          f"{USEFUL_PRODUCTS * 2 * m * n * d / 1e12:.3g} TFLOP of products", flush=True)

    # Agreement with the baseline on these inputs (loss, grad of the queries, grad of the table).
    reference = None
    agreement = {}
    for v in variants:
        v.table.grad = None
        loss, grad_q = v.step(q, targets, w_read, args.block_size)
        grad_t = v.table.grad.float()
        if reference is None:
            reference = (loss, grad_q, grad_t)
        else:
            agreement[v.name] = dict(loss=_rel(loss, reference[0]), grad_query=_rel(grad_q, reference[1]),
                                     grad_table=_rel(grad_t, reference[2]))
    del reference, grad_q, grad_t

    peaks = {}
    if cuda:
        for v in variants:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            v.step(q, targets, w_read, args.block_size)
            torch.cuda.synchronize()
            peaks[v.name] = torch.cuda.max_memory_allocated() - base

    _run(variants, q, targets, w_read, args, device)
    base_ms = statistics.median(variants[0].times)
    results = {}
    print(f"{'variant':20s} {'median ms':>10s} {'x blocked_fp32':>15s} {'TFLOP/s':>8s}  agreement with blocked_fp32")
    for v in variants:
        ms = statistics.median(v.times)
        row = dict(median_ms=ms, times_ms=v.times, ratio_to_blocked_fp32=ms / base_ms, useful_tflops=flops / ms / 1e9)
        if v.kernel == "triton":
            row["executed_tflops"] = KERNEL_PRODUCTS / USEFUL_PRODUCTS * flops / ms / 1e9
        if v.name in agreement:
            row["relative_error_vs_blocked_fp32"] = agreement[v.name]
        if v.name in peaks:
            row["peak_bytes_above_inputs"] = peaks[v.name]
        results[v.name] = row
        err = agreement.get(v.name)
        err_text = ", ".join(f"{k} {e:.1e}" for k, e in err.items()) if err else "(baseline)"
        print(f"{v.name:20s} {ms:10.2f} {ms / base_ms:15.3f} {row['useful_tflops']:8.3g}  {err_text}", flush=True)

    summary = dict(benchmark="entity_softmax", machine=machine, mentions=m, entities=n, dim=d,
                   block_size=args.block_size, repeat=args.repeat, useful_tflop=flops / 1e12, results=results,
                   notes=notes)
    if args.sweep and cuda and "triton" in results:
        summary["sweep"] = _sweep(q, table, targets, w_read, args, device, flops)
    for note in notes:
        print(note)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
    return summary


if __name__ == "__main__":
    main()
