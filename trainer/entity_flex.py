"""torch's FlexAttention as the local pass of the entity softmax (``model.memory_kernel: flex``).

``forward_blocks`` and ``backward_blocks`` have the contract of ``_forward_blocks`` and ``_backward_blocks``
in ``trainer.entity_softmax`` (one rank's pass over its own rows; the cross-rank merge stays in
``EntitySoftmax``), like the Triton kernels of ``trainer.entity_kernels``, so the row-partitioned memory
runs unchanged on any of the three.

A memory read is one attention head: the queries attend over the table with keys = values = rows and
scale 1. One head over 1M keys would give FlexAttention a grid of M/128 programs, so the table is cut into
C chunks of CHUNK_ROWS rows that become C heads over the same queries (the queries expanded, not copied
per head by autograd: their gradient is the sum over heads). Each head returns its normalised read and
its lse; the chunks merge as partial softmaxes do:

    lse = logsumexp_c lse_c,   read = sum_c exp(lse_c - lse) read_c.

The last chunk is padded to CHUNK_ROWS with zero rows that a ``score_mod`` sets to -inf. The queries are
padded to a multiple of QUERY_PAD so that a varying mention count compiles a handful of shapes.

Forward: FlexAttention (2 x M x N x D multiply-adds) plus the first argmax and the max score from a blocked
bf16 product (1 more: FlexAttention does not return them). The contract's running max is that max, the
running sum exp(lse - max), the running read read x sum.

Backward (the contract recomputes): FlexAttention again with autograd (2), then its own backward (5)
with, per chunk c, the upstream gradients that turn the chunk's softmax into the global one. With
w_c = exp(lse_c - lse_global) (lse_global over every rank's rows) the global dL/ds_i = P_i (g_l + g_r.e_i
- g_r.read) for row i in chunk c equals FlexAttention's p_ci (G_c.e_i - G_c.read_c) + h_c p_ci with

    G_c = w_c g_r,    h_c = w_c (g_l - g_r.read + g_r.read_c).

The target score's gradient g_t (d s_target) is added outside: g_t e_t into the query's gradient and g_t q
into the target row's, an index_add over the mentions (the kernels fold it into dS).

Precision: bfloat16 operands (queries, rows, and FlexAttention's P, dS) with float32 accumulation and a
float32 softmax, as the Triton kernels; the per-chunk reads come back in bf16, the merge is float32.
The same tolerances hold (trainer/entity_kernels.py; tests/trainer/test_entity_flex.py).

FlexAttention's backward does not run on CPU (torch 2.13 raises) and its forward there is a reference
path, so on CPU this module is tested with ``reference_attend`` in its place (the same chunked contract,
dense per chunk): the chunking, the padding, the merge and the gradient weights above. The compiled
FlexAttention itself runs only on CUDA (benchmarks/gpu_check.sh, part ``memread``).
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable

import torch

from trainer.entity_softmax import KernelUnavailable

CHUNK_ROWS = 8192  # rows per FlexAttention head: 1M rows -> 128 heads x (M / 128) query tiles of programs
QUERY_PAD = 128  # mention counts are padded to a multiple of this (FlexAttention's query tile)
TOP1_BLOCK = 65536  # rows per product of the argmax pass: M x 64K float32 scores at a time
ATTEND_DTYPE = torch.bfloat16  # the products' operands

# (queries [M, D], chunked rows [C, L, D], valid rows n) -> (read per chunk [C, M, D], lse per chunk [C, M])
Attend = Callable[[torch.Tensor, torch.Tensor, int], tuple[torch.Tensor, torch.Tensor]]


def unsupported_reason(query: torch.Tensor, rows: torch.Tensor) -> str | None:
    """Why FlexAttention cannot run these tensors, or None."""
    if rows.dtype == torch.float64 or query.dtype == torch.float64:
        return "float64 inputs: FlexAttention computes bfloat16 products (the blocked path is exact)"
    if rows.device.type != "cuda":
        return f"{rows.device.type} tensors: FlexAttention's backward needs CUDA"
    try:
        from torch.nn.attention import flex_attention  # noqa: F401
    except ImportError as exc:
        return f"this torch has no FlexAttention: {exc}"
    return None


def reference_attend(q: torch.Tensor, kv: torch.Tensor, n_valid: int) -> tuple[torch.Tensor, torch.Tensor]:
    """What FlexAttention computes here, densely per chunk in q's dtype (tests, CPU): differentiable."""
    c, length, _ = kv.shape
    scores = torch.einsum("md,cld->cml", q, kv.to(q.dtype))
    valid = torch.arange(c * length, device=q.device).view(c, 1, length) < n_valid
    scores = scores.masked_fill(~valid, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    return torch.einsum("cml,cld->cmd", torch.exp(scores - lse[..., None]), kv.to(q.dtype)), lse


@functools.cache
def _compiled_flex():
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


@functools.lru_cache(maxsize=16)
def _padding_mask(length: int, n_valid: int, device: torch.device):
    """The score_mod that hides the last chunk's padding rows: one function object (and captured tensor) per
    table shape, so that the compiled FlexAttention is not traced again at every call."""
    valid = torch.tensor(n_valid, device=device)

    def mask_padding(score, b, h, q_idx, kv_idx):
        return torch.where(h * length + kv_idx < valid, score, -float("inf"))

    return mask_padding


def flex_attend(q: torch.Tensor, kv: torch.Tensor, n_valid: int) -> tuple[torch.Tensor, torch.Tensor]:
    """FlexAttention (compiled) over the chunks as heads: q [M, D] -> ([C, M, D] in q's dtype, [C, M] float32)."""
    c, length, d = kv.shape
    q4 = q[None, None].expand(1, c, q.shape[0], d).contiguous()  # a copy per head: no stride-0 input to the kernel
    kv4 = kv[None]
    mask_padding = _padding_mask(length, n_valid, q.device)
    try:
        from torch.nn.attention.flex_attention import AuxRequest
    except ImportError:  # torch < 2.9: the older spelling
        out, lse = _compiled_flex()(q4, kv4, kv4, score_mod=mask_padding, scale=1.0, return_lse=True)
    else:
        out, aux = _compiled_flex()(q4, kv4, kv4, score_mod=mask_padding, scale=1.0,
                                    return_aux=AuxRequest(lse=True))
        lse = aux.lse
    return out[0], lse[0]


class _CompileFailures:
    """Around FlexAttention's compiled calls: a compile error of the machine's torch/Triton becomes
    KernelUnavailable (EntitySoftmax then falls back to the blocked path); device OOM stays itself."""

    def __init__(self, attend: Attend):
        self.active = attend is flex_attend

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if self.active and exc is not None and not isinstance(exc, (torch.OutOfMemoryError, KernelUnavailable)):
            raise KernelUnavailable(f"FlexAttention failed to compile or run: {kind.__name__}: {exc}") from exc
        return False


def _default_attend(device: torch.device) -> Attend:
    return flex_attend if device.type == "cuda" else reference_attend


def chunk_rows(rows: torch.Tensor, dtype: torch.dtype, chunk: int) -> torch.Tensor:
    """[N, D] -> [C, chunk, D] in ``dtype``, the last chunk padded with zero rows (masked by the attention)."""
    n, d = rows.shape
    c = max(1, math.ceil(n / chunk))
    out = torch.empty(c * chunk, d, dtype=dtype, device=rows.device)
    out[:n] = rows
    out[n:].zero_()
    return out.view(c, chunk, d)


def _pad_queries(x: torch.Tensor, dtype: torch.dtype, multiple: int) -> torch.Tensor:
    m = x.shape[0]
    padded = x.new_zeros((math.ceil(max(m, 1) / multiple) * multiple,) + tuple(x.shape[1:]), dtype=dtype)
    padded[:m] = x
    return padded


def _merge_chunks(read_c: torch.Tensor, lse_c: torch.Tensor,
                  dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Partial softmaxes over the chunks -> (lse [M], normalised read [M, D]) in ``dtype`` (float32 at least)."""
    lse = torch.logsumexp(lse_c.to(dtype), dim=0)
    weights = torch.exp(lse_c.to(dtype) - lse)  # [C, M]
    return lse, torch.einsum("cm,cmd->md", weights, read_c.to(dtype))


def _top1(q: torch.Tensor, rows: torch.Tensor, row_start: int, block: int,
          op_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(max score [M], first argmax [M] as global ids), products in ``op_dtype`` (bf16 on a GPU), blockwise;
    the scores in float32 (float64 when the operands are)."""
    m = q.shape[0]
    score_dtype = torch.promote_types(op_dtype, torch.float32)
    best = torch.full((m,), float("-inf"), dtype=score_dtype, device=q.device)
    top = torch.zeros(m, dtype=torch.long, device=q.device)
    qb = q.to(op_dtype)
    for start in range(0, rows.shape[0], block):
        scores = (qb @ rows[start:start + block].to(op_dtype).T).to(score_dtype)
        block_max, block_arg = scores.max(dim=1)
        top = torch.where(block_max > best, block_arg + (row_start + start), top)
        best = torch.maximum(best, block_max)
    return best, top


def forward_blocks(q_all: torch.Tensor, rows: torch.Tensor, row_start: int, block_size: int, with_read: bool,
                   dtype: torch.dtype, *, attend: Attend | None = None, chunk: int | None = None,
                   attend_dtype: torch.dtype | None = None):
    """``_forward_blocks`` of trainer.entity_softmax through FlexAttention: (running max [M], sum of exp
    relative to it [M], read relative to it [M, D] or [M, 0], first argmax [M] as global ids), float32.
    ``block_size`` is the torch path's and unused. ``attend``/``attend_dtype``: the attention and its
    operand dtype (default FlexAttention in bf16 on CUDA; tests pass ``reference_attend`` and float64)."""
    del block_size
    m, n, d = q_all.shape[0], rows.shape[0], rows.shape[1]
    dev = q_all.device
    if n == 0 or m == 0:  # a rank without rows: the torch path's neutral values
        return (torch.full((m,), float("-inf"), dtype=dtype, device=dev), torch.zeros(m, dtype=dtype, device=dev),
                torch.zeros(m, d if with_read else 0, dtype=dtype, device=dev),
                torch.zeros(m, dtype=torch.long, device=dev))
    attend = attend or _default_attend(dev)
    op_dtype = attend_dtype or (ATTEND_DTYPE if dev.type == "cuda" else dtype)
    with torch.no_grad(), torch.autocast(dev.type, enabled=False):
        kv = chunk_rows(rows, op_dtype, chunk or CHUNK_ROWS)
        with _CompileFailures(attend):
            read_c, lse_c = attend(_pad_queries(q_all, op_dtype, QUERY_PAD), kv, n)
        lse, read = _merge_chunks(read_c[:, :m], lse_c[:, :m], torch.promote_types(op_dtype, torch.float32))
        running_max, top1 = _top1(q_all, rows, row_start, TOP1_BLOCK, op_dtype)
        running_sum = torch.exp(lse - running_max)  # the softmax's sum relative to the max score
        running_read = read * running_sum[:, None] if with_read else torch.zeros(m, 0, device=dev)
    return running_max.to(dtype), running_sum.to(dtype), running_read.to(dtype), top1


def backward_blocks(q_all, rows, lse_all, g_l, g_t, local_targets, g_r, g_r_dot_read, block_size: int, grad_q,
                    grad_rows, accumulate: bool, *, attend: Attend | None = None, chunk: int | None = None,
                    attend_dtype: torch.dtype | None = None):
    """``_backward_blocks`` of trainer.entity_softmax through FlexAttention's backward: adds into grad_q [M, D];
    writes grad_rows [N_r, D] (adds into it when ``accumulate``), if given."""
    del block_size
    m, n = q_all.shape[0], rows.shape[0]
    if n == 0 or m == 0:
        return
    dev = q_all.device
    attend = attend or _default_attend(dev)
    op_dtype = attend_dtype or (ATTEND_DTYPE if dev.type == "cuda" else lse_all.dtype)
    acc = grad_q.dtype
    with torch.autocast(dev.type, enabled=False):
        q = _pad_queries(q_all, op_dtype, QUERY_PAD).requires_grad_()
        kv = chunk_rows(rows.detach(), op_dtype, chunk or CHUNK_ROWS).requires_grad_()
        with torch.enable_grad(), _CompileFailures(attend):
            read_c, lse_c = attend(q, kv, n)
        weights = torch.exp(lse_c[:, :m].to(acc) - lse_all.to(acc))  # w_c: chunk -> global softmax, [C, M]
        c, m_pad = lse_c.shape
        grad_read_c = torch.zeros(c, m_pad, q.shape[1], dtype=acc, device=dev)
        grad_lse_c = torch.zeros(c, m_pad, dtype=acc, device=dev)
        if g_r is not None:
            g_r = g_r.to(acc)
            grad_read_c[:, :m] = weights[..., None] * g_r
            chunk_dot = torch.einsum("md,cmd->cm", g_r, read_c[:, :m].to(acc))  # g_r . read_c
            grad_lse_c[:, :m] = weights * ((g_l - g_r_dot_read).to(acc) + chunk_dot)
        else:
            grad_lse_c[:, :m] = weights * g_l.to(acc)
        with _CompileFailures(attend):  # FlexAttention's backward compiles at its first call
            dq, dkv = torch.autograd.grad((read_c, lse_c), (q, kv), (grad_read_c.to(read_c.dtype), grad_lse_c))
        grad_q.add_(dq[:m].to(acc))
        own = (local_targets >= 0) & (local_targets < n)  # the target score's gradient, outside the attention
        idx = torch.nonzero(own, as_tuple=True)[0]
        targets = local_targets[idx]
        g_t = g_t.to(acc)
        if idx.numel():
            grad_q.index_add_(0, idx, g_t[idx, None] * rows.index_select(0, targets).to(acc))
        if grad_rows is not None:
            grad_table = dkv.view(-1, dkv.shape[-1])[:n].to(grad_rows.dtype)
            if accumulate:
                grad_rows.add_(grad_table)
            else:
                grad_rows.copy_(grad_table)
            if idx.numel():
                grad_rows.index_add_(0, targets, (g_t[idx, None] * q_all[idx].to(acc)).to(grad_rows.dtype))
