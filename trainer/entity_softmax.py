"""Softmax over a large entity table, in blocks of entities, never as a [mentions x entities] tensor,
optionally over a table split by rows across ranks.

A memory read at M mention positions with queries q [M, D] over a table E [N, D] needs

    s = q E^T,  lse = logsumexp(s),  read = softmax(s) E,  top1 = argmax(s)

and the entity-linking loss is ``lse - s[target]``. With N = 1M entities a dense
``s`` (and its softmax, and their gradients) is M x 1M floats per read and three
reads per step. ``EntitySoftmax`` does one pass over blocks of entities keeping a
running max, a running sum of exp and a running exp-weighted sum of entity vectors
(the online-softmax recurrence), and recomputes each block in the backward pass. Peak
extra memory is M x block_size. The softmax is in float32 (or float64 when the inputs
are) whatever the parameter dtype, so a bf16 table is safe; the products are float32 too
in the blocked backend, bf16 with float32 accumulation in the Triton one (see the end).

Gradients, with alpha = softmax(s), g_l = dL/dlse, g_r = dL/dread [M, D]:

    dL/ds_i = alpha_i * (g_l + g_r . e_i - g_r . read)
    dL/dq   = sum_i dL/ds_i e_i
    dL/de_i = sum_m dL/ds_mi q_m + sum_m alpha_mi g_r_m

Split by rows (``group`` given, k ranks; see trainer.memory): rank r holds rows
[floor(rN/k), floor((r+1)N/k)) and its own M_r queries (M = sum of M_r). Then

    forward    all-gather the queries [M, D] and their targets [M]
               the same blocked pass over the OWN rows only
               all-reduce(max) of the running max, then all-reduce(sum) of the rescaled
               sums of exp and of the target scores (the rank owning a target supplies
               its score, the others 0), all-reduce(min) of the argmax candidates
               reduce-scatter of the weighted sums: each rank receives its own queries' reads
    backward   all-gather the upstream gradients of the queries' outputs [M, D + 3]
               the blocked pass over the own rows: the complete gradient of the own rows
               (every rank's queries are here) and a partial gradient of every query
               reduce-scatter of the partial query gradients

The table never moves: per read a rank sends and receives O(M x D) numbers, not N x D.
The row gradient is that of the SUM of all ranks' losses. The top-k read takes each
rank's local top-k of every query, all-gathers the candidates' scores and ids, merges
them (identically on every rank) and reduce-scatters the weighted sums of the own rows.
With no group every collective is skipped: one rank, the whole table.

Three backends run the local pass over a rank's own rows (the collectives above are shared):

- ``blocked`` (``_forward_blocks`` / ``_backward_blocks``): torch matrix products over blocks of
  ``block_size`` rows, in float32 (float64 when the inputs are) whatever the parameter dtype;
  exact: it matches the dense computation to rounding (1e-5 in float32, 1e-13 in float64).
- ``triton`` (``trainer.entity_kernels``): fused kernels on tensor cores, bfloat16 products with
  float32 accumulation and a float32 softmax; within the relative tolerances listed there
  (lse 5e-4, read and gradients 1e-2 against float64). CUDA only (or Triton's interpreter on CPU,
  for tests), float32/bfloat16 inputs, entity_dim <= 256.
- ``flex`` (``trainer.entity_flex``): torch's FlexAttention over the table cut into chunks (heads),
  the same precision and tolerances. CUDA only.

``kernel="auto"`` (the default) takes ``CUDA_DEFAULT`` for CUDA tensors when it can run (the backend
benchmarks/gpu_check.sh measured faster; the kernels until measured), else ``blocked``. A fast backend
that raises ``KernelUnavailable`` (it cannot compile on this machine) is replaced by ``blocked`` with a
warning, for the rest of the process.
"""
from __future__ import annotations

import warnings

import torch
import torch.distributed as dist


class CommCounter:
    """Bytes this rank's memory collectives produced (the size of each collective's result on this rank)."""

    def __init__(self):
        self.bytes = 0

    def add(self, t: torch.Tensor) -> None:
        self.bytes += t.numel() * t.element_size()

    def take(self) -> int:
        b, self.bytes = self.bytes, 0
        return b


class _Comm:
    """The collectives of one read, over ``group``; a no-op world of one when group is None."""

    def __init__(self, group, counter: CommCounter | None):
        self.group = group
        self.world = dist.get_world_size(group) if group is not None else 1
        self.rank = dist.get_rank(group) if group is not None else 0
        self.counter = counter

    def _count(self, t: torch.Tensor) -> None:
        if self.counter is not None:
            self.counter.add(t)

    def counts(self, m: int, device) -> list[int]:
        if self.world == 1:
            return [m]
        out = torch.zeros(self.world, dtype=torch.long, device=device)  # [k]: one count per rank
        _all_gather(out, torch.tensor([m], dtype=torch.long, device=device), group=self.group)
        self._count(out)
        return out.tolist()

    def gather_rows(self, x: torch.Tensor, counts: list[int]) -> torch.Tensor:
        """[M_r, ...] on each rank -> [sum M_r, ...] in rank order, on every rank."""
        if self.world == 1:
            return x
        mmax = max(counts)
        padded = x.new_zeros((mmax,) + tuple(x.shape[1:]))
        padded[:x.shape[0]] = x
        out = x.new_empty((self.world * mmax,) + tuple(x.shape[1:]))
        _all_gather(out, padded, group=self.group)
        self._count(out)
        return torch.cat([out[i * mmax:i * mmax + c] for i, c in enumerate(counts)])

    def scatter_sum_rows(self, x: torch.Tensor, counts: list[int]) -> torch.Tensor:
        """[sum M_r, ...] partial on each rank -> this rank's rows of the sum over ranks, [M_r, ...]."""
        if self.world == 1:
            return x
        mmax = max(counts)
        padded = x.new_zeros((self.world * mmax,) + tuple(x.shape[1:]))
        offset = 0
        for i, c in enumerate(counts):
            padded[i * mmax:i * mmax + c] = x[offset:offset + c]
            offset += c
        out = x.new_empty((mmax,) + tuple(x.shape[1:]))
        _reduce_scatter(out, padded, group=self.group)
        self._count(padded)
        return out[:counts[self.rank]]

    def all_reduce(self, x: torch.Tensor, op=None) -> torch.Tensor:
        if self.world > 1:
            dist.all_reduce(x, op=op or dist.ReduceOp.SUM, group=self.group)
            self._count(x)
        return x

    def own_slice(self, x: torch.Tensor, counts: list[int]) -> torch.Tensor:
        start = sum(counts[:self.rank])
        return x[start:start + counts[self.rank]]


# torch >= 2.13 names them *_single, older releases *_tensor (same semantics: a flat output over ranks).
# Looked up at each call, so that a byte counter wrapped around torch.distributed sees them (benchmarks).
def _all_gather(output, tensor, group=None):
    return (getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)(output, tensor, group=group)


def _reduce_scatter(output, tensor, group=None):
    return (getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor)(output, tensor, group=group)


KERNELS = ("auto", "triton", "flex", "blocked")
# What 'auto' takes for CUDA tensors. benchmarks/gpu_check.sh (part memread) times the Triton kernels against
# FlexAttention at M=768, N=1M, D=256 and writes the decision (keep the kernels only if they are >= 1.25x
# faster, forward+backward) into benchmarks/results/gpu_check.json as "memory_read_decision"; this constant
# follows that file by hand. Until a GPU has measured it, the kernels.
CUDA_DEFAULT = "triton"


class KernelUnavailable(RuntimeError):
    """A fast backend could not be compiled or launched here (not a wrong result): EntitySoftmax falls back
    to the blocked path with a warning, for the rest of the process."""


_FAILED: dict[str, str] = {}  # backend -> why it fell back (once per process)


def resolve_kernel(kernel: str, query: torch.Tensor, rows: torch.Tensor) -> str:
    """'auto' | 'triton' | 'flex' | 'blocked' -> the backend that runs: 'triton', 'flex' or 'blocked' (see the
    module docstring).

    'auto' never imports Triton for CPU tensors (the blocked path is the CPU path) and takes CUDA_DEFAULT on
    CUDA when it can run; an explicit 'triton' or 'flex' that cannot run raises, saying why."""
    if kernel not in KERNELS:
        raise ValueError(f"memory kernel must be one of {KERNELS}, got {kernel!r}")
    if kernel == "blocked" or (kernel == "auto" and rows.device.type != "cuda"):
        return "blocked"
    wanted = CUDA_DEFAULT if kernel == "auto" else kernel
    if wanted in _FAILED:  # it failed to compile earlier in this process: do not pay the attempt again
        return "blocked"
    if wanted == "flex":
        from trainer import entity_flex

        reason = entity_flex.unsupported_reason(query, rows)
    else:
        try:
            from trainer import entity_kernels
        except ImportError as exc:
            if kernel == "auto":
                return "blocked"
            raise RuntimeError(f"memory kernel 'triton' needs the triton package: {exc}") from exc
        reason = entity_kernels.unsupported_reason(query, rows)
    if reason is None:
        return wanted
    if kernel == "auto":
        return "blocked"
    raise ValueError(f"memory kernel {wanted!r} cannot run here: {reason}")


def _local_passes(kernel: str):
    """(forward pass, backward pass) over this rank's rows for a resolved backend."""
    if kernel == "triton":
        from trainer import entity_kernels

        return entity_kernels.forward_blocks, entity_kernels.backward_blocks
    if kernel == "flex":
        from trainer import entity_flex

        return entity_flex.forward_blocks, entity_flex.backward_blocks
    return _forward_blocks, _backward_blocks


def _fall_back(kernel: str, exc: KernelUnavailable) -> None:
    if kernel not in _FAILED:
        _FAILED[kernel] = str(exc)
        warnings.warn(f"memory kernel {kernel!r} unavailable, the blocked float32 path runs instead: {exc}",
                      RuntimeWarning, stacklevel=3)


def _run_pass(kernel: str, which: int, *args) -> tuple[str, object]:
    """Run the forward (which=0) or backward (1) local pass of ``kernel``; if it cannot compile here, the
    blocked pass (same contract) instead. -> (the backend that ran, its result)."""
    if kernel != "blocked" and kernel not in _FAILED:
        try:
            return kernel, _local_passes(kernel)[which](*args)
        except KernelUnavailable as exc:
            _fall_back(kernel, exc)
    return "blocked", _local_passes("blocked")[which](*args)


def _compute_dtype(*tensors: torch.Tensor) -> torch.dtype:
    return torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32


def _scratch(n: int, dtype: torch.dtype, device) -> torch.Tensor:
    return torch.empty(n, dtype=dtype, device=device)


def _block_view(buf: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """A contiguous [rows, cols] view of the scratch buffer (the last block is narrower)."""
    return buf[:rows * cols].view(rows, cols)


def _forward_blocks(q_all, rows, row_start: int, block_size: int, with_read: bool, dtype):
    """One pass over this rank's rows: running max, sum of exp, exp-weighted sum of rows and argmax.

    Per block: one product for the scores into a reused buffer, exp in place, one addmm into the
    running read. 2 x M x N x D multiply-adds with the read, M x N x D without.
    """
    m_all, n_local, dev = q_all.shape[0], rows.shape[0], q_all.device
    running_max = torch.full((m_all,), float("-inf"), dtype=dtype, device=dev)
    running_sum = torch.zeros(m_all, dtype=dtype, device=dev)
    running_read = torch.zeros(m_all, rows.shape[1] if with_read else 0, dtype=dtype, device=dev)
    top1 = torch.zeros(m_all, dtype=torch.long, device=dev)
    buf = _scratch(m_all * min(block_size, max(n_local, 1)), dtype, dev)
    for start in range(0, n_local, block_size):
        block = rows[start:start + block_size].to(dtype)
        scores = _block_view(buf, m_all, block.shape[0])
        with torch.autocast(dev.type, enabled=False):  # the backward recomputes in `dtype`: so must the forward
            torch.mm(q_all, block.T, out=scores)  # [M, B]: the only score tensor alive at any time
        block_max, block_arg = scores.max(dim=1)
        new_max = torch.maximum(running_max, block_max)
        top1 = torch.where(block_max > running_max, block_arg + (row_start + start), top1)
        rescale = torch.exp(running_max - new_max)
        weights = scores.sub_(new_max[:, None]).exp_()
        running_sum.mul_(rescale).add_(weights.sum(dim=1))
        if with_read:
            with torch.autocast(dev.type, enabled=False):
                running_read.mul_(rescale[:, None]).addmm_(weights, block)
        running_max = new_max
    return running_max, running_sum, running_read, top1


def _backward_blocks(q_all, rows, lse_all, g_l, g_t, local_targets, g_r, g_r_dot_read, block_size: int, grad_q,
                     grad_rows, accumulate: bool):
    """The recomputing backward over this rank's rows: adds into grad_q [M, D]; writes grad_rows [N_r, D]
    (adds into it when ``accumulate``).

    With the read (g_r given), per block of rows E_b:
        [S; G] = [q; g_r] E_b^T                one product (the recomputed scores and g_r . e_i)
        A = exp(S - lse),  dS = A (g_l + G - g_r . read) + g_t at each own target    in place
        grad_q += dS E_b                       one addmm
        grad_rows_b = [A; dS]^T [g_r; q]       one product, straight into the gradient's rows
    so 5 x M x N x D multiply-adds in three products per block (3 without the read). The target
    score's gradient rides in dS (it is d s_target), so there is no gather or index_add over the
    table, and every row of grad_rows is written by exactly one product: no zero-fill either.
    """
    m_all, n_local, dev, dtype = q_all.shape[0], rows.shape[0], q_all.device, lse_all.dtype
    with_read = g_r is not None
    if with_read:
        lhs = torch.cat([q_all, g_r], 0)  # [2M, D]
        rhs = torch.cat([g_r, q_all], 0)  # [2M, D]: pairs with [A; dS]
        shift = (g_l - g_r_dot_read)[:, None]
    else:
        lhs = rhs = q_all
    buf = _scratch(lhs.shape[0] * min(block_size, max(n_local, 1)), dtype, dev)
    for start in range(0, n_local, block_size):
        block = rows[start:start + block_size].to(dtype)
        width = block.shape[0]
        prod = _block_view(buf, lhs.shape[0], width)
        torch.mm(lhs, block.T, out=prod)
        alpha = prod[:m_all].sub_(lse_all[:, None]).exp_()  # the recomputed softmax, [M, B]
        if with_read:
            grad_scores = prod[m_all:].add_(shift).mul_(alpha)
            weighted = prod  # [A; dS], pairs with rhs = [g_r; q]
        else:
            grad_scores = weighted = alpha.mul_(g_l[:, None])
        here = (local_targets >= start) & (local_targets < start + width)
        if bool(here.any()):  # one entry per mention: its target's score gradient
            m_idx = torch.nonzero(here, as_tuple=True)[0]
            grad_scores[m_idx, local_targets[m_idx] - start] += g_t[m_idx]
        grad_q.addmm_(grad_scores, block)
        if grad_rows is not None:
            out = grad_rows[start:start + width]
            if accumulate:
                out.addmm_(weighted.T, rhs)
            else:
                torch.mm(weighted.T, rhs, out=out)


class EntitySoftmax(torch.autograd.Function):
    """(own queries [M_r, D], own rows [N_r, D], own targets [M_r]) ->
    (lse [M_r], read [M_r, D] or [M_r, 0], top1 [M_r], target score [M_r]), over the whole N x D table.

    Targets are global entity ids. ``with_read=False`` (the linking head) skips the weighted sums.
    ``kernel``: the resolved backend of the local pass, 'blocked' or 'triton' (``resolve_kernel``).
    """

    @staticmethod
    def forward(ctx, query, rows, targets, row_start: int, block_size: int, with_read: bool, group, counter,
                accumulate_grad: bool, kernel: str = "blocked"):
        comm = _Comm(group, counter)
        dtype = _compute_dtype(query, rows)
        counts = comm.counts(query.shape[0], query.device)
        ctx.empty = sum(counts) == 0
        if ctx.empty:  # no rank has a mention: nothing to read (every rank knows it from the counts)
            ctx.shapes = (rows.shape, rows.dtype, query.dtype, query.device)
            ctx.mark_non_differentiable(top1 := torch.zeros(0, dtype=torch.long, device=query.device))
            empty = query.new_zeros(0, dtype=dtype)
            return empty, query.new_zeros(0, rows.shape[1] if with_read else 0, dtype=dtype), top1, empty.clone()
        q_all = comm.gather_rows(query, counts).to(dtype)  # gathered in the queries' dtype (bf16 halves it)
        t_all = comm.gather_rows(targets, counts)
        m_all, n_local = q_all.shape[0], rows.shape[0]
        dev = q_all.device
        kernel, (running_max, running_sum, running_read, top1) = _run_pass(
            kernel, 0, q_all, rows, row_start, block_size, with_read, dtype)
        # Combine across ranks: the global max, then sums rescaled to it.
        global_max = comm.all_reduce(running_max.clone(), dist.ReduceOp.MAX)
        rescale = torch.exp(running_max - global_max)  # 0 on a rank without rows
        local = t_all - row_start
        owned = (local >= 0) & (local < n_local)
        target_score = torch.zeros(m_all, dtype=dtype, device=dev)
        if owned.any():
            # index_select, not rows[idx]: advanced indexing into a large table costs time in N here
            target_score[owned] = (q_all[owned] * rows.index_select(0, local[owned]).to(dtype)).sum(dim=1)
        sums = comm.all_reduce(torch.stack([running_sum * rescale, target_score]))
        candidate = torch.where(running_max == global_max, top1, torch.full_like(top1, torch.iinfo(torch.long).max))
        top1 = comm.all_reduce(candidate, dist.ReduceOp.MIN)
        lse_all = global_max + torch.log(sums[0])
        own_read = comm.scatter_sum_rows(running_read * rescale[:, None], counts)
        lse = comm.own_slice(lse_all, counts)
        read = own_read / comm.own_slice(sums[0], counts)[:, None]
        ctx.save_for_backward(q_all, rows, t_all, lse_all, read)
        ctx.counts, ctx.row_start, ctx.block_size, ctx.with_read = counts, row_start, block_size, with_read
        ctx.group, ctx.counter, ctx.query_dtype, ctx.kernel = group, counter, query.dtype, kernel
        # A leaf table in the compute dtype may take its gradient straight into .grad (no [N, D] temporary).
        ctx.accumulate_into = rows if accumulate_grad and rows.is_leaf and rows.dtype == dtype else None
        top1_own = comm.own_slice(top1, counts)
        ctx.mark_non_differentiable(top1_own)
        ctx.set_materialize_grads(False)
        return lse, read, top1_own, comm.own_slice(sums[1], counts)

    @staticmethod
    def backward(ctx, grad_lse, grad_read, _grad_top1, grad_target):
        if ctx.empty:
            rows_shape, rows_dtype, query_dtype, device = ctx.shapes
            rows_grad = torch.zeros(rows_shape, dtype=rows_dtype, device=device) if ctx.needs_input_grad[1] else None
            return (torch.zeros(0, rows_shape[1], dtype=query_dtype, device=device), rows_grad,
                    None, None, None, None, None, None, None, None)
        q_all, rows, t_all, lse_all, read = ctx.saved_tensors
        comm = _Comm(ctx.group, ctx.counter)
        dtype, counts, d = lse_all.dtype, ctx.counts, rows.shape[1]
        m_own = counts[comm.rank]
        # Every rank takes part in the collectives, also where an output had no gradient (zeros then).
        zeros = lambda *shape: torch.zeros(*shape, dtype=dtype, device=lse_all.device)  # noqa: E731
        g_l = grad_lse.to(dtype) if grad_lse is not None else zeros(m_own)
        g_t = grad_target.to(dtype) if grad_target is not None else zeros(m_own)
        if ctx.with_read:
            g_r = grad_read.to(dtype) if grad_read is not None else zeros(m_own, d)
            g_r_dot_read = (g_r * read).sum(dim=1)
            packed = torch.cat([g_l[:, None], g_t[:, None], g_r_dot_read[:, None], g_r], dim=1)
        else:
            packed = torch.stack([g_l, g_t], dim=1)
        packed = comm.gather_rows(packed, counts)
        g_l, g_t = packed[:, 0], packed[:, 1]
        if ctx.with_read:
            g_r_dot_read, g_r = packed[:, 2], packed[:, 3:]
        need_rows = ctx.needs_input_grad[1]
        grad_q = torch.zeros_like(q_all)
        grad_rows, accumulate = None, False
        if need_rows:
            leaf = ctx.accumulate_into
            if leaf is not None:  # add straight into the parameter's own gradient buffer (see blocked_entity_softmax)
                if leaf.grad is None:
                    leaf.grad = torch.zeros_like(leaf)
                grad_rows, accumulate = leaf.grad, True
            else:
                grad_rows = torch.empty(rows.shape, dtype=dtype, device=rows.device)
        _run_pass(ctx.kernel, 1, q_all, rows, lse_all, g_l, g_t, t_all - ctx.row_start, g_r if ctx.with_read else None,
                  g_r_dot_read if ctx.with_read else None, ctx.block_size, grad_q, grad_rows, accumulate)
        grad_query = comm.scatter_sum_rows(grad_q, counts)
        return (grad_query.to(ctx.query_dtype), grad_rows.to(rows.dtype) if need_rows and not accumulate else None,
                None, None, None, None, None, None, None, None)


def blocked_entity_softmax(query: torch.Tensor, table: torch.Tensor, block_size: int = 65536,
                           targets: torch.Tensor | None = None, with_read: bool = True, *, row_start: int = 0,
                           group=None, counter: CommCounter | None = None, accumulate_grad: bool = False,
                           kernel: str = "auto"):
    """lse [M], read = softmax(q E^T) E [M, D] (float32/64; [M, 0] without read), top1 [M] (and the target
    score when targets are given); see the module docstring.

    With ``group``, ``table`` is this rank's rows starting at global row ``row_start``, ``query`` and
    ``targets`` (global ids) this rank's own, and the results are over the whole table.

    ``accumulate_grad``: the backward adds the table's gradient straight into ``table.grad`` (a leaf
    in the compute dtype; allocated once if None) block by block, and hands autograd no gradient for
    it. It saves an N x D temporary per read and autograd's sum of them, but bypasses hooks on the
    parameter: only for a table nothing else manages (the row-partitioned memory's own rows).

    ``kernel``: 'auto', 'triton' or 'blocked', the backend of the local pass (module docstring).
    """
    if block_size < 1:
        raise ValueError("block_size must be >= 1")
    kernel = resolve_kernel(kernel, query, table)
    given = targets is not None
    if not given:
        targets = torch.zeros(query.shape[0], dtype=torch.long, device=query.device)
    lse, read, top1, target_score = EntitySoftmax.apply(query, table, targets, row_start, block_size, with_read,
                                                        group, counter, accumulate_grad, kernel)
    return (lse, read, top1, target_score) if given else (lse, read, top1)


@torch.no_grad()
def topk_entity_read(query: torch.Tensor, table: torch.Tensor, k: int = 100, block_size: int = 65536, *,
                     row_start: int = 0, n_entities: int | None = None, group=None,
                     counter: CommCounter | None = None):
    """Inference read: softmax over the k best-scoring entities only, found blockwise.

    Returns (read [M, D], top_ids [M, k'], top_scores [M, k']) with k' = min(k, N). Split by rows
    (``group``): local top-k of every rank, then one global merge; ``n_entities`` is the whole table's N.
    """
    rows = table
    n_entities = rows.shape[0] if n_entities is None else n_entities
    comm = _Comm(group, counter)
    dtype = _compute_dtype(query, rows)
    counts = comm.counts(query.shape[0], query.device)
    q_all = comm.gather_rows(query, counts).to(dtype)
    m_all, dev = q_all.shape[0], q_all.device
    k = min(k, n_entities)
    best_scores = torch.full((m_all, 0), float("-inf"), dtype=dtype, device=dev)
    best_ids = torch.zeros((m_all, 0), dtype=torch.long, device=dev)
    for start in range(0, rows.shape[0], block_size):
        scores = q_all @ rows[start:start + block_size].to(dtype).T
        cand_scores = torch.cat([best_scores, scores], dim=1)
        cand_ids = torch.cat([best_ids, torch.arange(row_start + start, row_start + start + scores.shape[1],
                                                     device=dev).expand(m_all, -1)], dim=1)
        best_scores, pos = cand_scores.topk(min(k, cand_scores.shape[1]), dim=1)
        best_ids = cand_ids.gather(1, pos)
    if comm.world > 1:  # pad to k so every rank sends the same shape, then merge identically everywhere
        pad = k - best_scores.shape[1]
        best_scores = torch.cat([best_scores, best_scores.new_full((m_all, pad), float("-inf"))], 1)
        best_ids = torch.cat([best_ids, best_ids.new_full((m_all, pad), -1)], 1)
        all_scores = best_scores.new_empty((comm.world * m_all, k))
        all_ids = best_ids.new_empty((comm.world * m_all, k))
        _all_gather(all_scores, best_scores.contiguous(), group=group)
        _all_gather(all_ids, best_ids.contiguous(), group=group)
        comm._count(all_scores), comm._count(all_ids)
        merged_scores = all_scores.view(comm.world, m_all, k).permute(1, 0, 2).reshape(m_all, -1)
        merged_ids = all_ids.view(comm.world, m_all, k).permute(1, 0, 2).reshape(m_all, -1)
        best_scores, pos = merged_scores.topk(k, dim=1)
        best_ids = merged_ids.gather(1, pos)
    alpha = torch.softmax(best_scores, dim=1)
    local = best_ids - row_start
    mine = (local >= 0) & (local < rows.shape[0])
    partial = torch.zeros(m_all, rows.shape[1], dtype=dtype, device=dev)
    if mine.any():
        contrib = alpha[mine][:, None] * rows[local[mine]].to(dtype)
        partial.index_add_(0, torch.nonzero(mine, as_tuple=True)[0], contrib)
    read = comm.scatter_sum_rows(partial, counts)
    return read, comm.own_slice(best_ids, counts), comm.own_slice(best_scores, counts)


def dense_entity_softmax(query: torch.Tensor, table: torch.Tensor):
    """The reference: materialises [M, N]. For tests and the benchmark only."""
    dtype = _compute_dtype(query, table)
    scores = query.to(dtype) @ table.to(dtype).T
    lse = torch.logsumexp(scores, dim=1)
    read = torch.softmax(scores, dim=1) @ table.to(dtype)
    return lse, read, scores.argmax(dim=1)


