"""Fused Triton kernels for the entity softmax: the local pass of ``trainer.entity_softmax`` on tensor cores.

``forward_blocks`` and ``backward_blocks`` have the contract of ``_forward_blocks`` and
``_backward_blocks`` there (one rank's pass over its own rows; the cross-rank merge stays in
``EntitySoftmax``), so the row-partitioned layout runs unchanged on either backend:

    forward      grid (query tiles, row chunks), the query tile fastest so that the programs
                 reading one chunk of the table run together and share it through L2. Each
                 program runs the online softmax over its chunk (running max, sum of exp,
                 exp-weighted sum of rows, first argmax) and writes them as a partial; a small
                 merge in torch (float32) rescales the partials to the global max.
    backward     two kernels, both recomputing the scores from q and the rows:
      rows       grid over tiles of rows; each program keeps its tile of the table and loops
                 over ALL queries (there are few): grad_rows = dS^T q + P^T g_r, written
                 once per row (or added into ``.grad``), no atomics.
      queries    grid (query tiles, row chunks) as in the forward: dS E per chunk into a
                 partial [chunks, M, D], summed in torch.

with P = exp(q e_i - lse) and dS = P (g_l + g_r . e_i - g_r . read) + g_t at the target (see
``trainer.entity_softmax``). Products: 2 x M x N x D multiply-adds forward with the read,
7 backward (the rows kernel 4, the queries kernel 3; 2 + 2 without the read).

Precision. The products take bfloat16 operands (the queries, the rows whatever their dtype in
memory, P, dS and g_r, rounded to nearest) with float32 accumulation (``tl.dot``); the running
max, sum of exp, lse and every exp are float32. The tests (tests/trainer/test_entity_kernels.py;
at M=768, N=65,536, D=256 on a GPU, ``gpu`` marker) hold the kernel to these relative errors
against a float64 reference, ||x - ref|| / ||ref||:

    lse 5e-4,  read 1e-2,  grad of the queries 1e-2,  grad of the rows 1e-2,
    target score 1e-5 (float32: computed outside the kernels),

and per mention |lse - ref| <= 2^-8 ||q|| max_i ||e_i|| (the worst bf16-product score error),
top1 an entity whose exact score is within twice that of the max. Rounding the operands alone,
emulated in float64 at that shape (an estimate, not a GPU measurement): lse 1.7e-5 (1.9e-4 with
4x larger queries, a peaked softmax), read 1.7e-3 (3.6e-3), grad of the queries 1.7e-3 (2.2e-3),
of the rows 2.4e-3 (2.8e-3); the bounds leave a margin of 3 or more. Structural mistakes (a lost
tile, a wrong rescale, a mask) are caught by the same kernels with ``products="fp32"`` (float32
operands, ``input_precision="ieee"``, no tensor cores), which must match float64 to 1e-5.

Compilation. The machine's Triton compiles at the first launch of each (D, dtypes, read) combination; the
mention count M is not specialised (``UNSPECIALISED``), so varying counts reuse it. A tile that runs out of
shared memory gives way to the next in ``TILES``; any other compile or launch error raises
``KernelUnavailable``, on which ``EntitySoftmax`` falls back to the blocked path with a warning. Each
compiled kernel's registers set how many programs an SM holds, and so how many row chunks the split-N
kernels launch (``blocks_per_sm``).

The float64 and the blocked torch path stay in ``trainer.entity_softmax``: they are exact. Under
``TRITON_INTERPRET=1`` the kernels run on CPU tensors through Triton's interpreter, which has no
bfloat16 ``tl.dot``: there the bf16 operands are rounded to nearest in float32 (same values) and
multiplied in float32. Triton reads the variable when it decorates a kernel, its own library's at
its first import included, so it must be set before anything imports triton (DeepSpeed does):
the tests start a Python of their own for it.
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from trainer.entity_softmax import KernelUnavailable

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"  # Triton decides at decoration time, so do we
MAX_DIM = 256  # the row width a program holds in full (registers / shared memory sized for it)
# The mention count changes every step: Triton would specialise it on divisibility by 16 (and == 1) and
# compile every kernel twice or thrice; the masks already handle any M.
UNSPECIALISED = ["M"]


def unsupported_reason(query: torch.Tensor, rows: torch.Tensor) -> str | None:
    """Why the kernels cannot run these tensors, or None."""
    if rows.dtype == torch.float64 or query.dtype == torch.float64:
        return "float64 inputs: the kernels compute bfloat16 products (the blocked path is exact)"
    if rows.shape[1] > MAX_DIM:
        return f"entity_dim {rows.shape[1]} > {MAX_DIM}"
    if rows.device.type == "cuda":
        return None if not INTERPRET else "TRITON_INTERPRET=1 was set when trainer.entity_kernels was imported"
    if rows.device.type == "cpu" and INTERPRET:
        return None
    return f"{rows.device.type} tensors need CUDA (or TRITON_INTERPRET=1 set before import, for tests)"


# ---------------------------------------------------------------------------------------------- the kernels

@triton.jit
def _bf16_round(x, EMULATE: tl.constexpr):
    """x rounded to bfloat16 (to nearest, ties to even): a bf16 tensor, or under the interpreter
    (no bf16 tl.dot) the same values in float32."""
    if EMULATE:
        bits = x.to(tl.float32).to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        out = bits.to(tl.float32, bitcast=True)
    else:
        out = x.to(tl.bfloat16)
    return out


@triton.jit
def _operand(x, BF16: tl.constexpr, EMULATE: tl.constexpr):
    """x as a product operand: rounded to bf16 once (reused by every product it enters), or float32."""
    if BF16:
        out = _bf16_round(x, EMULATE)
    else:
        out = x.to(tl.float32)
    return out


@triton.jit
def _dot(a, b, acc, BF16: tl.constexpr, EMULATE: tl.constexpr):
    """acc + a @ b, float32 accumulation, of ``_operand``s: tensor cores for bf16, ieee float32 otherwise."""
    if BF16 and not EMULATE:
        out = tl.dot(a, b, acc)
    else:
        out = tl.dot(a, b, acc, input_precision="ieee")
    return out


@triton.jit(do_not_specialize=UNSPECIALISED)
def _forward_kernel(q_ptr, e_ptr, max_ptr, sum_ptr, read_ptr, top_ptr,
                    M, N, stride_q, stride_e, row_start, rows_per_chunk, D: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                    WITH_READ: tl.constexpr, BF16: tl.constexpr, EMULATE: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_c = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    m_ok = offs_m < M
    d_ok = offs_d < D
    q = _operand(tl.load(q_ptr + offs_m[:, None] * stride_q + offs_d[None, :],
                         mask=m_ok[:, None] & d_ok[None, :], other=0.0), BF16, EMULATE)
    rel_n = tl.arange(0, BLOCK_N)
    running_max = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    running_sum = tl.zeros((BLOCK_M,), tl.float32)
    running_read = tl.zeros((BLOCK_M, BLOCK_D), tl.float32)
    top = tl.zeros((BLOCK_M,), tl.int32)
    n_begin = pid_c * rows_per_chunk
    n_end = tl.minimum(n_begin + rows_per_chunk, N)
    for n0 in range(n_begin, n_end, BLOCK_N):
        offs_n = n0 + rel_n
        n_ok = offs_n < n_end
        rows = e_ptr + tl.cast(n0, tl.int64) * stride_e  # 64-bit only in the tile's base: N x D may pass 2^31
        e = _operand(tl.load(rows + rel_n[:, None] * stride_e + offs_d[None, :],
                             mask=n_ok[:, None] & d_ok[None, :], other=0.0), BF16, EMULATE)
        scores = _dot(q, tl.trans(e), tl.zeros((BLOCK_M, BLOCK_N), tl.float32), BF16, EMULATE)
        scores = tl.where(n_ok[None, :], scores, float("-inf"))
        block_max = tl.max(scores, axis=1)
        # the first column reaching the block's max; a later block must beat it strictly: ties -> lowest id
        block_arg = tl.min(tl.where(scores == block_max[:, None], offs_n[None, :], 2147483647), axis=1)
        top = tl.where(block_max > running_max, block_arg, top)
        new_max = tl.maximum(running_max, block_max)
        rescale = tl.exp(running_max - new_max)
        weights = tl.exp(scores - new_max[:, None])
        running_sum = running_sum * rescale + tl.sum(weights, axis=1)
        if WITH_READ:
            running_read = _dot(_operand(weights, BF16, EMULATE), e, running_read * rescale[:, None], BF16, EMULATE)
        running_max = new_max
    part = pid_c * M + offs_m
    tl.store(max_ptr + part, running_max, mask=m_ok)
    tl.store(sum_ptr + part, running_sum, mask=m_ok)
    tl.store(top_ptr + part, top.to(tl.int64) + row_start, mask=m_ok)
    if WITH_READ:
        tl.store(read_ptr + part[:, None].to(tl.int64) * D + offs_d[None, :], running_read,
                 mask=m_ok[:, None] & d_ok[None, :])


@triton.jit(do_not_specialize=UNSPECIALISED)
def _backward_rows_kernel(q_ptr, gr_ptr, lse_ptr, shift_ptr, gt_ptr, target_ptr, e_ptr, grad_e_ptr,
                          M, N, stride_q, stride_e, stride_ge, D: tl.constexpr,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                          WITH_READ: tl.constexpr, ACCUMULATE: tl.constexpr, BF16: tl.constexpr,
                          EMULATE: tl.constexpr):
    """Transposed ([rows, queries]) scores, so that P^T and dS^T come out of the products in the layout
    the gradient's products take them (as FlashAttention's dK/dV loop): no transpose of a register tile."""
    pid_n = tl.program_id(0)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    n_ok = offs_n < N
    d_ok = offs_d < D
    rel_n = tl.arange(0, BLOCK_N)
    rows = e_ptr + (pid_n * BLOCK_N).to(tl.int64) * stride_e
    e = _operand(tl.load(rows + rel_n[:, None] * stride_e + offs_d[None, :],
                         mask=n_ok[:, None] & d_ok[None, :], other=0.0), BF16, EMULATE)
    grad_e = tl.zeros((BLOCK_N, BLOCK_D), tl.float32)
    zeros = tl.zeros((BLOCK_N, BLOCK_M), tl.float32)
    for m0 in range(0, M, BLOCK_M):
        offs_m = m0 + tl.arange(0, BLOCK_M)
        m_ok = offs_m < M
        qd_mask = m_ok[:, None] & d_ok[None, :]
        q = _operand(tl.load(q_ptr + offs_m[:, None] * stride_q + offs_d[None, :], mask=qd_mask, other=0.0),
                     BF16, EMULATE)
        lse = tl.load(lse_ptr + offs_m, mask=m_ok, other=float("inf"))  # padding queries: P = 0
        shift = tl.load(shift_ptr + offs_m, mask=m_ok, other=0.0)
        g_t = tl.load(gt_ptr + offs_m, mask=m_ok, other=0.0)
        target = tl.load(target_ptr + offs_m, mask=m_ok, other=-1)
        probs_t = tl.exp(_dot(e, tl.trans(q), zeros, BF16, EMULATE) - lse[None, :])  # [BLOCK_N, BLOCK_M]
        if WITH_READ:
            g_r = _operand(tl.load(gr_ptr + offs_m[:, None] * stride_q + offs_d[None, :], mask=qd_mask, other=0.0),
                           BF16, EMULATE)
            grad_t = probs_t * (_dot(e, tl.trans(g_r), zeros, BF16, EMULATE) + shift[None, :])
        else:
            grad_t = probs_t * shift[None, :]
        grad_t += tl.where(offs_n[:, None] == target[None, :], g_t[None, :], 0.0)
        grad_e = _dot(_operand(grad_t, BF16, EMULATE), q, grad_e, BF16, EMULATE)
        if WITH_READ:
            grad_e = _dot(_operand(probs_t, BF16, EMULATE), g_r, grad_e, BF16, EMULATE)
    out = grad_e_ptr + (pid_n * BLOCK_N).to(tl.int64) * stride_ge + rel_n[:, None] * stride_ge + offs_d[None, :]
    nd_mask = n_ok[:, None] & d_ok[None, :]
    if ACCUMULATE:
        grad_e += tl.load(out, mask=nd_mask, other=0.0)
    tl.store(out, grad_e, mask=nd_mask)


@triton.jit(do_not_specialize=UNSPECIALISED)
def _backward_queries_kernel(q_ptr, gr_ptr, lse_ptr, shift_ptr, gt_ptr, target_ptr, e_ptr, grad_q_ptr,
                             M, N, stride_q, stride_e, rows_per_chunk, D: tl.constexpr,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                             WITH_READ: tl.constexpr, BF16: tl.constexpr, EMULATE: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_c = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    m_ok = offs_m < M
    d_ok = offs_d < D
    qd_mask = m_ok[:, None] & d_ok[None, :]
    q = _operand(tl.load(q_ptr + offs_m[:, None] * stride_q + offs_d[None, :], mask=qd_mask, other=0.0),
                 BF16, EMULATE)
    g_r = q
    if WITH_READ:
        g_r = _operand(tl.load(gr_ptr + offs_m[:, None] * stride_q + offs_d[None, :], mask=qd_mask, other=0.0),
                       BF16, EMULATE)
    lse = tl.load(lse_ptr + offs_m, mask=m_ok, other=float("inf"))
    shift = tl.load(shift_ptr + offs_m, mask=m_ok, other=0.0)
    g_t = tl.load(gt_ptr + offs_m, mask=m_ok, other=0.0)
    target = tl.load(target_ptr + offs_m, mask=m_ok, other=-1)
    grad_q = tl.zeros((BLOCK_M, BLOCK_D), tl.float32)
    zeros = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    n_begin = pid_c * rows_per_chunk
    n_end = tl.minimum(n_begin + rows_per_chunk, N)
    rel_n = tl.arange(0, BLOCK_N)
    for n0 in range(n_begin, n_end, BLOCK_N):
        offs_n = n0 + rel_n
        n_ok = offs_n < n_end
        rows = e_ptr + tl.cast(n0, tl.int64) * stride_e
        e = _operand(tl.load(rows + rel_n[:, None] * stride_e + offs_d[None, :],
                             mask=n_ok[:, None] & d_ok[None, :], other=0.0), BF16, EMULATE)  # padding rows: 0
        probs = tl.exp(_dot(q, tl.trans(e), zeros, BF16, EMULATE) - lse[:, None])
        if WITH_READ:
            grad = probs * (_dot(g_r, tl.trans(e), zeros, BF16, EMULATE) + shift[:, None])
        else:
            grad = probs * shift[:, None]
        grad += tl.where(target[:, None] == offs_n[None, :], g_t[:, None], 0.0)
        grad_q = _dot(_operand(grad, BF16, EMULATE), e, grad_q, BF16, EMULATE)
    part = pid_c * M + offs_m
    tl.store(grad_q_ptr + part[:, None].to(tl.int64) * D + offs_d[None, :], grad_q, mask=qd_mask)


# ---------------------------------------------------------------------------------------------- tiles

# Per kernel: (BLOCK_M, BLOCK_N, num_warps, num_stages), tried in order; a config the GPU cannot hold
# (Triton's OutOfResources, shared memory) is dropped for the next. D=256 in bf16: a 64 x 256 tile is
# 32 KiB. Compiled for sm_90 (Triton 3.9, no GPU needed), the first configs take 64-100 KiB of shared
# memory with a bf16 table and 100-165 KiB with a float32 one (an H100 gives 227 KiB); all use wgmma.
# Chosen for few register spills at that compile, NOT from timings; every first choice still compiled to
# 255 registers with 232-824 B of spill (results/entity_kernels_sm90.json). benchmarks/bench_memory_read.py
# times each tile on a GPU with its registers and spills as the machine's Triton compiled them.
TILES = {
    "forward": [(64, 64, 8, 2), (64, 64, 4, 1), (32, 32, 4, 1)],
    "rows": [(32, 64, 8, 2), (64, 64, 8, 1), (32, 32, 4, 1)],
    "queries": [(64, 64, 8, 2), (64, 64, 4, 1), (32, 32, 4, 1)],
}
INTERPRET_TILES = (32, 64, 1, 1)  # small tiles: ragged edges in small tests, few interpreted steps
# Split-N kernels launch about (resident programs per SM) x SMs programs: one full wave, few partials to
# merge. How many programs an SM holds follows from the compiled kernel's registers (``blocks_per_sm``):
# at 255 registers an 8-warp program fills an SM's 64K registers alone. Until a kernel has been compiled
# (its first launch) ONE per SM is assumed, what the sm_90 compile of every first-choice tile showed.
DEFAULT_PROGRAMS_PER_SM = 1
_working: dict[tuple, int] = {}  # (kernel, D, dtypes) -> index of the first config that compiled
_resident: dict[tuple, int] = {}  # (kernel, D, dtypes, tile) -> programs per SM, from the compiled kernel
_compiled: dict[tuple, dict] = {}  # the same key -> registers, spills, shared memory as compiled (benchmarks)


def blocks_per_sm(n_regs: int, num_warps: int, shared_bytes: int = 0, *, regs_per_sm: int = 65536,
                  shared_per_sm: int = 228 * 1024, max_warps: int = 64) -> int:
    """Programs of a compiled kernel one SM holds at once (Hopper's limits by default): registers are
    allocated per warp in units of 256, shared memory per program, and an SM runs at most 64 warps."""
    regs_per_warp = -(-max(n_regs, 1) * 32 // 256) * 256
    by_regs = regs_per_sm // (regs_per_warp * num_warps)
    by_shared = shared_per_sm // shared_bytes if shared_bytes else max_warps
    return max(1, min(by_regs, by_shared, max_warps // num_warps))


def _note_resident(kind: str, key: tuple, tile: tuple, compiled) -> None:
    n_regs = getattr(compiled, "n_regs", None)  # None under the interpreter
    if isinstance(n_regs, int) and n_regs > 0:
        shared = getattr(getattr(compiled, "metadata", None), "shared", 0) or 0
        _resident[(kind,) + key + tuple(tile)] = blocks_per_sm(n_regs, tile[2], shared)
        _compiled[(kind,) + key + tuple(tile)] = {"n_regs": n_regs, "n_spills": getattr(compiled, "n_spills", None),
                                                  "shared_bytes": shared,
                                                  "programs_per_sm": _resident[(kind,) + key + tuple(tile)]}


def _block_d(d: int) -> int:
    return max(16, triton.next_power_of_2(d))


def _target_programs(device: torch.device, resident_key: tuple = ()) -> int:
    if device.type != "cuda":
        return 16  # the interpreter: a few chunks, so that the merge of partials is exercised
    per_sm = _resident.get(resident_key, DEFAULT_PROGRAMS_PER_SM)
    return per_sm * torch.cuda.get_device_properties(device).multi_processor_count


def _rows_per_chunk(n: int, m_tiles: int, block_n: int, device: torch.device,
                    resident_key: tuple = ()) -> tuple[int, int]:
    """Split N into chunks (multiples of block_n) so that m_tiles x chunks ~ the target program count."""
    chunks = max(1, min(triton.cdiv(n, block_n), _target_programs(device, resident_key) // max(m_tiles, 1)))
    rows = triton.cdiv(triton.cdiv(n, chunks), block_n) * block_n
    return rows, triton.cdiv(n, rows)


def _launch(kind: str, key: tuple, launch, tiles, device: torch.device):
    """Run ``launch(block_m, block_n, num_warps, num_stages)`` with the first config that fits the GPU,
    on the tensors' GPU (Triton launches on the current device)."""
    if device.type == "cuda":
        with torch.cuda.device(device):
            return _launch_here(kind, key, launch, tiles)
    return _launch_here(kind, key, launch, tiles)


def _launch_here(kind: str, key: tuple, launch, tiles):
    if tiles is not None:
        return launch(*tiles)
    if INTERPRET:
        return launch(*INTERPRET_TILES)
    configs = TILES[kind]
    start = _working.get((kind,) + key, 0)
    failures = []
    for i in range(start, len(configs)):
        try:
            out = launch(*configs[i])
        except triton.runtime.errors.OutOfResources as exc:  # this tile does not fit: the next, smaller one may
            failures.append(f"{configs[i]}: {exc}")
            continue
        except torch.OutOfMemoryError:
            raise  # the partials did not fit in device memory: not the kernel's fault, no fallback hides it
        except Exception as exc:  # noqa: BLE001 - any compile error of the machine's Triton/ptxas
            raise KernelUnavailable(f"the {kind} kernel failed to compile or launch with tiles {configs[i]} "
                                    f"for {key}: {type(exc).__name__}: {exc}") from exc
        _working[(kind,) + key] = i
        return out
    raise KernelUnavailable(f"no {kind} tile config fits this GPU for {key}: {'; '.join(failures)}")


def _input_dtype(device: torch.device, bf16: bool) -> torch.dtype:
    """The dtype the kernels read queries and upstream gradients in: bf16 on a GPU when the products are bf16
    (half the bytes; the products round them anyway), float32 for float32 products and under the interpreter."""
    return torch.bfloat16 if (bf16 and device.type == "cuda" and not INTERPRET) else torch.float32


def _kernel_input(x: torch.Tensor, bf16: bool) -> torch.Tensor:
    """Queries and upstream gradients as the kernels read them (``_input_dtype``), contiguous rows."""
    return x.contiguous().to(_input_dtype(x.device, bf16))


def _table(rows: torch.Tensor) -> torch.Tensor:
    if rows.stride(1) != 1:
        rows = rows.contiguous()
    if INTERPRET and rows.dtype not in (torch.float32,):
        rows = rows.float()  # the interpreter reads bf16 correctly but cannot multiply it: same values
    return rows


# ---------------------------------------------------------------------------------------------- the passes

def forward_blocks(q_all: torch.Tensor, rows: torch.Tensor, row_start: int, block_size: int, with_read: bool,
                   dtype: torch.dtype, *, products: str = "bf16", tiles=None):
    """``_forward_blocks`` of trainer.entity_softmax on the GPU: (running max [M], sum of exp [M], read
    [M, D] or [M, 0] relative to the max, first argmax [M] as global ids), float32. ``block_size`` is the
    torch path's and unused here (the kernels have their own tiles)."""
    del block_size
    if dtype != torch.float32:
        raise ValueError(f"the Triton entity softmax computes in float32, got {dtype}")
    m, n, d = q_all.shape[0], rows.shape[0], rows.shape[1]
    dev = q_all.device
    if n == 0 or m == 0:  # a rank without rows: the torch path's neutral values
        return (torch.full((m,), float("-inf"), device=dev), torch.zeros(m, device=dev),
                torch.zeros(m, d if with_read else 0, device=dev), torch.zeros(m, dtype=torch.long, device=dev))
    bf16 = _products(products)
    q, e = _kernel_input(q_all, bf16), _table(rows)
    key = (d, q.dtype, e.dtype, with_read, bf16)

    def launch(block_m, block_n, num_warps, num_stages):
        m_tiles = triton.cdiv(m, block_m)
        tile = (block_m, block_n, num_warps, num_stages)
        rows_per_chunk, chunks = _rows_per_chunk(n, m_tiles, block_n, dev, ("forward",) + key + tile)
        part_max = torch.empty(chunks, m, device=dev)
        part_sum = torch.empty(chunks, m, device=dev)
        part_top = torch.empty(chunks, m, dtype=torch.long, device=dev)
        part_read = torch.empty(chunks, m, d, device=dev) if with_read else part_sum  # unused without the read
        compiled = _forward_kernel[(m_tiles, chunks)](
            q, e, part_max, part_sum, part_read, part_top, m, n, q.stride(0), e.stride(0), row_start,
            rows_per_chunk, D=d, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=_block_d(d), WITH_READ=with_read,
            BF16=bf16, EMULATE=INTERPRET, num_warps=num_warps, num_stages=num_stages)
        _note_resident("forward", key, tile, compiled)
        return part_max, part_sum, part_read, part_top

    part_max, part_sum, part_read, part_top = _launch("forward", key, launch, tiles, dev)
    with torch.autocast(dev.type, enabled=False):  # float32: under autocast the einsum's bmm would run in bf16
        running_max = part_max.max(dim=0).values
        rescale = torch.exp(part_max - running_max)  # [chunks, M]
        running_sum = (part_sum * rescale).sum(dim=0)
        running_read = (torch.einsum("cm,cmd->md", rescale, part_read) if with_read
                        else torch.zeros(m, 0, device=dev))
    top1 = torch.where(part_max == running_max, part_top, torch.iinfo(torch.long).max).min(dim=0).values
    return running_max, running_sum, running_read, top1


def backward_blocks(q_all, rows, lse_all, g_l, g_t, local_targets, g_r, g_r_dot_read, block_size: int, grad_q,
                    grad_rows, accumulate: bool, *, products: str = "bf16", tiles=None):
    """``_backward_blocks`` of trainer.entity_softmax on the GPU: adds into grad_q [M, D] (float32); writes
    grad_rows [N_r, D] (float32, contiguous; adds into it when ``accumulate``), if given."""
    del block_size
    m, n, d = q_all.shape[0], rows.shape[0], rows.shape[1]
    if n == 0 or m == 0:
        return
    with_read = g_r is not None
    bf16 = _products(products)
    q, e = _kernel_input(q_all, bf16), _table(rows)
    gr = _kernel_input(g_r, bf16) if with_read else q
    shift = ((g_l - g_r_dot_read) if with_read else g_l).float().contiguous()
    lse, g_t = lse_all.float().contiguous(), g_t.float().contiguous()
    # a target outside this rank's rows matches no column
    target = torch.where((local_targets >= 0) & (local_targets < n), local_targets, -1).to(torch.int32)
    key = (d, q.dtype, e.dtype, with_read, bf16)

    def launch_queries(block_m, block_n, num_warps, num_stages):
        m_tiles = triton.cdiv(m, block_m)
        tile = (block_m, block_n, num_warps, num_stages)
        rows_per_chunk, chunks = _rows_per_chunk(n, m_tiles, block_n, q.device, ("queries",) + key + tile)
        part = torch.empty(chunks, m, d, device=q.device)
        compiled = _backward_queries_kernel[(m_tiles, chunks)](
            q, gr, lse, shift, g_t, target, e, part, m, n, q.stride(0), e.stride(0), rows_per_chunk, D=d,
            BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=_block_d(d), WITH_READ=with_read, BF16=bf16,
            EMULATE=INTERPRET, num_warps=num_warps, num_stages=num_stages)
        _note_resident("queries", key, tile, compiled)
        return part

    # The queries' partials first, the rows kernel next, grad_q last: a kernel that fails to compile has
    # written nothing, so the blocked fallback (EntitySoftmax) starts from untouched gradients.
    query_parts = _launch("queries", key, launch_queries, tiles, q.device)
    if grad_rows is not None:
        if grad_rows.dtype != torch.float32 or grad_rows.stride(1) != 1:
            raise ValueError("grad_rows must be a float32 tensor with contiguous rows")

        def launch_rows(block_m, block_n, num_warps, num_stages):
            compiled = _backward_rows_kernel[(triton.cdiv(n, block_n),)](
                q, gr, lse, shift, g_t, target, e, grad_rows, m, n, q.stride(0), e.stride(0),
                grad_rows.stride(0), D=d, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=_block_d(d), WITH_READ=with_read,
                ACCUMULATE=accumulate, BF16=bf16, EMULATE=INTERPRET, num_warps=num_warps, num_stages=num_stages)
            _note_resident("rows", key, (block_m, block_n, num_warps, num_stages), compiled)

        _launch("rows", key, launch_rows, tiles, q.device)

    with torch.autocast(q.device.type, enabled=False):
        grad_q.add_(query_parts.sum(dim=0))


def _products(products: str) -> bool:
    if products not in ("bf16", "fp32"):
        raise ValueError(f"products must be 'bf16' or 'fp32', got {products!r}")
    return products == "bf16"
