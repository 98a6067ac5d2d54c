"""Softmax over a large entity table, in blocks of entities, never as a [mentions x entities] tensor.

A memory read at M mention positions with queries q [M, D] over a table E [N, D] needs

    s = q E^T,  lse = logsumexp(s),  read = softmax(s) E,  top1 = argmax(s)

and the entity-linking loss is ``lse - s[target]``. With N = 1M entities a dense
``s`` (and its softmax, and their gradients) is M x 1M floats per read and three
reads per step. ``BlockedEntitySoftmax`` does one pass over blocks of entities
keeping a running max, a running sum of exp and a running exp-weighted sum of
entity vectors (the online-softmax recurrence), and recomputes each block in the
backward pass. Peak extra memory is M x block_size. Arithmetic is in float32 (or
float64 when the inputs are) whatever the parameter dtype, so a bf16 table is safe.

Gradients, with alpha = softmax(s), g_l = dL/dlse, g_r = dL/dread [M, D]:

    dL/ds_i = alpha_i * (g_l + g_r . e_i - g_r . read)
    dL/dq   = sum_i dL/ds_i e_i
    dL/de_i = sum_m dL/ds_mi q_m + sum_m alpha_mi g_r_m
"""
from __future__ import annotations

import torch


def _compute_dtype(*tensors: torch.Tensor) -> torch.dtype:
    return torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32


class BlockedEntitySoftmax(torch.autograd.Function):
    """(q [M, D], table [N, D], targets [M]) -> (lse [M], read [M, D], top1 [M], target score [M]).

    Exact to the dense computation. The target score q . e_target is computed here too,
    so that its gradient goes into the same [N, D] table gradient by index_add (indexing
    the table outside would make autograd allocate a second dense [N, D] zero gradient).
    With ``with_read=False`` (the linking head) the weighted sum is skipped and read is [M, 0].
    """

    @staticmethod
    def forward(ctx, query: torch.Tensor, table: torch.Tensor, targets: torch.Tensor, block_size: int,
                with_read: bool = True):
        dtype = _compute_dtype(query, table)
        q = query.to(dtype)
        m_rows, n_entities = q.shape[0], table.shape[0]
        running_max = torch.full((m_rows,), float("-inf"), dtype=dtype, device=q.device)
        running_sum = torch.zeros(m_rows, dtype=dtype, device=q.device)
        running_read = torch.zeros(m_rows, table.shape[1] if with_read else 0, dtype=dtype, device=q.device)
        top1 = torch.zeros(m_rows, dtype=torch.long, device=q.device)
        for start in range(0, n_entities, block_size):
            block = table[start:start + block_size].to(dtype)
            scores = q @ block.T  # [M, B]: the only score tensor alive at any time
            block_max, block_arg = scores.max(dim=1)
            new_max = torch.maximum(running_max, block_max)
            top1 = torch.where(block_max > running_max, block_arg + start, top1)
            rescale = torch.exp(running_max - new_max)  # exp(-inf) = 0 on the first block
            weights = torch.exp(scores - new_max[:, None])
            running_sum = running_sum * rescale + weights.sum(dim=1)
            if with_read:
                running_read = running_read * rescale[:, None] + weights @ block
            running_max = new_max
        lse = running_max + torch.log(running_sum)
        read = running_read / running_sum[:, None]
        target_score = (q * table[targets].to(dtype)).sum(dim=1)
        ctx.save_for_backward(query, table, targets, lse, read)
        ctx.block_size, ctx.with_read = block_size, with_read
        ctx.mark_non_differentiable(top1)
        ctx.set_materialize_grads(False)  # unused outputs get None: their terms are skipped
        return lse, read, top1, target_score

    @staticmethod
    def backward(ctx, grad_lse, grad_read, _grad_top1, grad_target):
        query, table, targets, lse, read = ctx.saved_tensors
        dtype = lse.dtype
        q = query.to(dtype)
        g_l = grad_lse.to(dtype) if grad_lse is not None else torch.zeros_like(lse)
        g_r = grad_read.to(dtype) if (grad_read is not None and ctx.with_read) else None
        g_r_dot_read = (g_r * read).sum(dim=1) if g_r is not None else None
        grad_q = torch.zeros_like(q)
        grad_table = torch.zeros(table.shape, dtype=dtype, device=table.device) if ctx.needs_input_grad[1] else None
        if grad_lse is not None or g_r is not None:
            for start in range(0, table.shape[0], ctx.block_size):
                block = table[start:start + ctx.block_size].to(dtype)
                alpha = torch.exp(q @ block.T - lse[:, None])  # recomputed, [M, B]
                if g_r is None:
                    grad_scores = alpha * g_l[:, None]
                else:
                    grad_scores = alpha * (g_l[:, None] + g_r @ block.T - g_r_dot_read[:, None])
                grad_q += grad_scores @ block
                if grad_table is not None:
                    grad_table[start:start + ctx.block_size] = grad_scores.T @ q
                    if g_r is not None:
                        grad_table[start:start + ctx.block_size] += alpha.T @ g_r
        if grad_target is not None:
            g_t = grad_target.to(dtype)[:, None]
            grad_q += g_t * table[targets].to(dtype)
            if grad_table is not None:
                grad_table.index_add_(0, targets, g_t * q)
        return (grad_q.to(query.dtype),
                grad_table.to(table.dtype) if grad_table is not None else None,
                None, None, None)


def blocked_entity_softmax(query: torch.Tensor, table: torch.Tensor, block_size: int = 65536,
                           targets: torch.Tensor | None = None, with_read: bool = True):
    """lse [M], read = softmax(q E^T) E [M, D] (float32/64), top1 [M] (and the target score when targets
    are given); see the module docstring."""
    if block_size < 1:
        raise ValueError("block_size must be >= 1")
    given = targets is not None
    if not given:
        targets = torch.zeros(query.shape[0], dtype=torch.long, device=query.device)
    lse, read, top1, target_score = BlockedEntitySoftmax.apply(query, table, targets, block_size, with_read)
    return (lse, read, top1, target_score) if given else (lse, read, top1)


def dense_entity_softmax(query: torch.Tensor, table: torch.Tensor):
    """The reference: materialises [M, N]. For tests and the benchmark only."""
    dtype = _compute_dtype(query, table)
    scores = query.to(dtype) @ table.to(dtype).T
    lse = torch.logsumexp(scores, dim=1)
    read = torch.softmax(scores, dim=1) @ table.to(dtype)
    return lse, read, scores.argmax(dim=1)


@torch.no_grad()
def topk_entity_read(query: torch.Tensor, table: torch.Tensor, k: int = 100, block_size: int = 65536):
    """Inference read: softmax over the k best-scoring entities only, found blockwise.

    Returns (read [M, D], top_ids [M, k'], top_scores [M, k']) with k' = min(k, N).
    """
    dtype = _compute_dtype(query, table)
    q = query.to(dtype)
    k = min(k, table.shape[0])
    best_scores = torch.full((q.shape[0], 0), float("-inf"), dtype=dtype, device=q.device)
    best_ids = torch.zeros((q.shape[0], 0), dtype=torch.long, device=q.device)
    for start in range(0, table.shape[0], block_size):
        scores = q @ table[start:start + block_size].to(dtype).T
        cand_scores = torch.cat([best_scores, scores], dim=1)
        cand_ids = torch.cat([best_ids, torch.arange(start, start + scores.shape[1], device=q.device)
                              .expand(q.shape[0], -1)], dim=1)
        best_scores, pos = cand_scores.topk(min(k, cand_scores.shape[1]), dim=1)
        best_ids = cand_ids.gather(1, pos)
    alpha = torch.softmax(best_scores, dim=1)
    read = torch.einsum("mk,mkd->md", alpha, table[best_ids].to(dtype))
    return read, best_ids, best_scores
