"""The entity table split by rows across ranks (vocabulary-parallel): no rank ever holds all of it.

With k ranks, rank r owns rows [floor(r N / k), floor((r+1) N / k)) of the N x D table
(``row_range``) and their AdamW state (``RowShardedMemory``). Reads go through
``trainer.entity_softmax`` with the rank's process group: queries move, the table never
does (the module docstring there has the collectives). The row gradient is that of the
SUM of all ranks' losses; data-parallel training averages, so ``finish_gradients``
divides it by k before clipping and stepping.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from trainer.entity_softmax import CommCounter

# Rows are initialised in fixed chunks, each from its own seeded generator, so that the
# initial table does not depend on how it is partitioned (1 rank, k ranks, replicated).
INIT_CHUNK_ROWS = 65536


def row_range(n_entities: int, rank: int, world_size: int) -> tuple[int, int]:
    """Rows [start, end) owned by ``rank``; sizes differ by at most one when k does not divide N."""
    return n_entities * rank // world_size, n_entities * (rank + 1) // world_size


def init_rows(n_entities: int, dim: int, start: int, end: int, std: float, seed: int,
              dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Rows [start, end) of the N(0, std^2) initial table: the same values however the table is split."""
    out = torch.empty(end - start, dim, dtype=dtype)
    first, last = start // INIT_CHUNK_ROWS, (max(end, start + 1) - 1) // INIT_CHUNK_ROWS
    for chunk in range(first, last + 1):
        c0, c1 = chunk * INIT_CHUNK_ROWS, min(n_entities, (chunk + 1) * INIT_CHUNK_ROWS)
        lo, hi = max(c0, start), min(c1, end)
        if lo >= hi:
            continue
        g = torch.Generator().manual_seed(seed * 1_000_003 + chunk)
        block = torch.randn(c1 - c0, dim, generator=g, dtype=torch.float32)
        out[lo - start:hi - start] = (block[lo - c0:hi - c0] * std).to(dtype)
    return out


class RowShardedMemory(nn.Module):
    """This rank's rows of the entity table, with their own AdamW state.

    Deliberately NOT a submodule of the model DeepSpeed wraps: ZeRO neither partitions,
    broadcasts, casts nor steps it. The trainer steps it after each optimizer step of the
    engine (``step``), and saves/loads it next to DeepSpeed's checkpoint (trainer.checkpoint).
    """

    def __init__(self, n_entities: int, dim: int, rank: int = 0, world_size: int = 1, group=None,
                 device: torch.device | str = "cpu"):
        super().__init__()
        self.n_entities, self.dim = n_entities, dim
        self.rank, self.world_size, self.group = rank, world_size, group
        self.row_start, self.row_end = row_range(n_entities, rank, world_size)
        self.weight = nn.Parameter(torch.zeros(self.row_end - self.row_start, dim, device=device))
        self.comm = CommCounter()
        self.optimizer = None
        self.scheduler = None

    def init_weights(self, std: float, seed: int) -> None:
        with torch.no_grad():
            self.weight.copy_(init_rows(self.n_entities, self.dim, self.row_start, self.row_end, std, seed))

    def make_optimizer(self, lr: float, betas, eps: float, weight_decay: float, lr_lambda, fused: bool = False):
        self.optimizer = torch.optim.AdamW([self.weight], lr=lr, betas=tuple(betas), eps=eps,
                                           weight_decay=weight_decay, fused=fused)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_lambda)

    def finish_gradients(self, clip: float) -> torch.Tensor:
        """Average over data-parallel ranks (the row gradient is that of the sum of all ranks' losses),
        then clip by the global norm over all ranks' rows. Returns that norm (a tensor: no host sync)."""
        grad = self.weight.grad
        if grad is None:
            grad = self.weight.grad = torch.zeros_like(self.weight)
        if self.world_size > 1:
            grad.div_(self.world_size)
        sq = grad.float().pow(2).sum()
        if self.group is not None and self.world_size > 1:
            dist.all_reduce(sq, group=self.group)
        norm = sq.sqrt()
        if clip > 0:
            grad.mul_(torch.clamp(clip / (norm + 1e-6), max=1.0).to(grad.dtype))
        return norm

    def step(self, clip: float) -> torch.Tensor:
        norm = self.finish_gradients(clip)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=False)
        return norm

    def bytes_per_rank(self) -> int:
        """Parameter + gradient + two Adam moments of the own rows."""
        return 4 * self.weight.numel() * self.weight.element_size()


def zero_table_traffic_bytes(stage: int, n_entities: int, dim: int, param_bytes: int, grad_bytes: int,
                             micro_batches: int, world_size: int) -> int:
    """What ZeRO moves per rank per optimizer step for a replicated N x D table (the size of each collective's
    result, as ``CommCounter`` counts): ``memory_comm_bytes`` of the replicated layout.

    stage 0: one all-reduce of the gradient per step. Stage 1: a reduce-scatter of the gradient per step
    and an all-gather of the updated rows. Stage 2 reduces at every micro-batch. Stage 3 gathers the table
    once per micro-batch (DeepSpeed keeps it for the three reads and the backward within its default
    stage3_max_reuse_distance) and reduce-scatters its gradient. benchmarks/bench_memory.py checks these
    figures against the bytes counted at torch.distributed.
    """
    if world_size <= 1:
        return 0
    table = n_entities * dim
    if stage == 0:
        return table * grad_bytes
    if stage == 1:
        return table * (grad_bytes + param_bytes)
    if stage == 2:
        return micro_batches * table * grad_bytes + table * param_bytes
    return micro_batches * table * (param_bytes + grad_bytes)
