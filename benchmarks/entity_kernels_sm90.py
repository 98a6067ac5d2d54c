"""What the entity-softmax kernels compile to for a Hopper GPU (sm_90), on any machine: no GPU needed.

    python benchmarks/entity_kernels_sm90.py --json benchmarks/results/entity_kernels_sm90.json
    python benchmarks/entity_kernels_sm90.py --configs 64,64,8,2 32,64,8,2 --kernels rows

For each kernel of trainer/entity_kernels.py and each tile config (BLOCK_M, BLOCK_N, num_warps,
num_stages; default: the configs of ``entity_kernels.TILES``), with a bfloat16 and a float32 table,
Triton compiles it ahead of time for sm_90 and this reports the shared memory it needs (an H100 /
H200 block may have 227 KiB), its stack frame (register spills land there; 0 is best) and registers
(from cuobjdump, shipped with Triton), and whether the products became wgmma instructions (Hopper's
tensor-core path; without them they run on the slower mma.sync or FMA path). These are compiler
facts, not timings: benchmarks/bench_entity_softmax.py times the kernels on a GPU.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9 warns when unset; 1 is the default behaviour

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from trainer import entity_kernels  # noqa: E402

SHARED_LIMIT = 227 * 1024  # bytes of shared memory one block may use on sm_90


def _signature(kind: str, query: str, table: str) -> dict:
    """Argument types of each kernel, in order (pointers, int32 scalars, constexprs)."""
    tail = {k: "constexpr" for k in ("D", "BLOCK_M", "BLOCK_N", "BLOCK_D", "WITH_READ", "BF16", "EMULATE")}
    if kind == "forward":
        head = dict(q_ptr=f"*{query}", e_ptr=f"*{table}", max_ptr="*fp32", sum_ptr="*fp32", read_ptr="*fp32",
                    top_ptr="*i64", M="i32", N="i32", stride_q="i32", stride_e="i32", row_start="i32",
                    rows_per_chunk="i32")
    else:
        head = dict(q_ptr=f"*{query}", gr_ptr=f"*{query}", lse_ptr="*fp32", shift_ptr="*fp32", gt_ptr="*fp32",
                    target_ptr="*i32", e_ptr=f"*{table}", out_ptr="*fp32", M="i32", N="i32", stride_q="i32",
                    stride_e="i32")
        head["stride_ge" if kind == "rows" else "rows_per_chunk"] = "i32"
        if kind == "rows":
            tail["ACCUMULATE"] = "constexpr"
    # the names must be the kernel's own
    fn = _kernel(kind)
    names = fn.arg_names
    types = list(head.values())
    sig = {name: types[i] for i, name in enumerate(names[:len(types)])}
    for name in names[len(types):]:
        sig[name] = tail[name]
    return sig


def _kernel(kind: str):
    return {"forward": entity_kernels._forward_kernel, "rows": entity_kernels._backward_rows_kernel,
            "queries": entity_kernels._backward_queries_kernel}[kind]


def _resources(cubin: bytes) -> dict:
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        text = subprocess.run([str(tool), "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
    found = {key: re.search(rf"{key}:(\d+)", text) for key in ("REG", "STACK", "LOCAL")}
    return {key.lower(): int(m.group(1)) if m else None for key, m in found.items()}


def compile_report(kind: str, config: tuple, table: str, dim: int, bf16: bool = True) -> dict:
    block_m, block_n, num_warps, num_stages = config
    constexprs = dict(D=dim, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=max(16, triton.next_power_of_2(dim)),
                      WITH_READ=True, BF16=bf16, EMULATE=False)
    if kind == "rows":
        constexprs["ACCUMULATE"] = True
    query = "bf16"  # the kernels read the queries and the upstream gradients as bf16 on a GPU
    source = ASTSource(fn=_kernel(kind), signature=_signature(kind, query, table), constexprs=constexprs)
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32),
                              options=dict(num_warps=num_warps, num_stages=num_stages))
    shared = compiled.metadata.shared
    return dict(kernel=kind, config=list(config), table=table, dim=dim, shared_bytes=shared,
                fits_sm90=shared <= SHARED_LIMIT, wgmma="wgmma" in compiled.asm["ptx"],
                **_resources(compiled.asm["cubin"]))


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernels", nargs="+", default=["forward", "rows", "queries"])
    parser.add_argument("--configs", nargs="+", help="BLOCK_M,BLOCK_N,num_warps,num_stages (default: TILES)")
    parser.add_argument("--tables", nargs="+", default=["bf16", "fp32"], help="table dtypes in memory")
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    rows = []
    print(f"triton {triton.__version__}, sm_90, D={args.dim}, bf16 products")
    print(f"{'kernel':8s} {'config':16s} {'table':5s} {'shared KiB':>10s} {'stack B':>8s} {'regs':>5s} wgmma")
    for kind in args.kernels:
        configs = [tuple(int(x) for x in c.split(",")) for c in args.configs] if args.configs \
            else entity_kernels.TILES[kind]
        for config in configs:
            for table in args.tables:
                r = compile_report(kind, config, table, args.dim)
                rows.append(r)
                print(f"{kind:8s} {str(config):16s} {table:5s} {r['shared_bytes'] / 1024:10.1f} {r['stack']:8d} "
                      f"{r['reg']:5d} {r['wgmma']}{'' if r['fits_sm90'] else '  (too much shared memory)'}",
                      flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(dict(triton=triton.__version__, target="sm_90", dim=args.dim,
                                             products="bf16", kernels=rows), indent=2) + "\n")
    return rows


if __name__ == "__main__":
    main()
