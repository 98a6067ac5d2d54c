"""The row-partitioned entity memory equals the single-rank dense computation, on 2 and 3 real gloo ranks.

Each rank holds only its rows [floor(rN/k), floor((r+1)N/k)) of a table whose N is not a
multiple of k, and its own queries (a different number on each rank, none on one of them).
Forward values and the gradients of the queries and of the rows must equal the dense
[M x N] computation over all ranks' queries to 1e-5 in float32.
"""
from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from trainer.entity_softmax import CommCounter, blocked_entity_softmax, dense_entity_softmax, topk_entity_read
from trainer.memory import init_rows, row_range

N, D, BLOCK, TOPK = 37, 6, 5, 7
MENTIONS = {2: [9, 4], 3: [6, 0, 5]}  # queries per rank; rank 1 of 3 has none


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _problem(world: int):
    """The full problem, identical on every rank: queries, targets, upstream gradients, table."""
    g = torch.Generator().manual_seed(7)
    m = sum(MENTIONS[world])
    table = torch.randn(N, D, generator=g)
    queries = torch.randn(m, D, generator=g) * 2
    targets = torch.randint(0, N, (m,), generator=g)
    w_lse, w_read = torch.randn(m, generator=g), torch.randn(m, D, generator=g)
    return table, queries, targets, w_lse, w_read


def _dense(world: int):
    """Reference in float64: the EL loss (lse - target score) and a downstream use of the read."""
    table, queries, targets, w_lse, w_read = (t.double() if t.is_floating_point() else t for t in _problem(world))
    table.requires_grad_(), queries.requires_grad_()
    lse, read, top1 = dense_entity_softmax(queries, table)
    score = (queries * table[targets]).sum(1)
    loss = (w_lse * (lse - score)).sum() + (w_read * read).sum()
    gq, gt = torch.autograd.grad(loss, (queries, table))
    lse_h, _, _ = dense_entity_softmax(queries, table)
    head_loss = (w_lse * (lse_h - (queries * table[targets]).sum(1))).sum()
    gq_h, gt_h = torch.autograd.grad(head_loss, (queries, table))
    top_read, top_ids, top_scores = topk_entity_read(queries.detach(), table.detach(), TOPK, BLOCK)
    return dict(lse=lse, read=read, top1=top1, score=score, gq=gq, gt=gt, gq_head=gq_h, gt_head=gt_h,
                top_read=top_read, top_ids=top_ids)


def _rank_main(rank: int, world: int, port: int, out_dir: str):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    table, queries, targets, w_lse, w_read = _problem(world)
    counts = MENTIONS[world]
    lo, hi = sum(counts[:rank]), sum(counts[:rank + 1])
    start, end = row_range(N, rank, world)
    rows = table[start:end].clone().requires_grad_()
    q = queries[lo:hi].clone().requires_grad_()
    counter = CommCounter()
    split = dict(row_start=start, group=dist.group.WORLD)
    lse, read, top1, score = blocked_entity_softmax(q, rows, BLOCK, targets[lo:hi], True, counter=counter, **split)
    loss = (w_lse[lo:hi] * (lse - score)).sum() + (w_read[lo:hi] * read).sum()
    gq, gr = torch.autograd.grad(loss, (q, rows))
    # The linking head: no read.
    lse_h, read_h, _, score_h = blocked_entity_softmax(q, rows, BLOCK, targets[lo:hi], False, **split)
    gq_h, gr_h = torch.autograd.grad((w_lse[lo:hi] * (lse_h - score_h)).sum(), (q, rows))
    top_read, top_ids, _ = topk_entity_read(q.detach(), rows.detach(), TOPK, BLOCK, n_entities=N, **split)
    torch.save(dict(lse=lse, read=read, top1=top1, score=score, gq=gq, gr=gr, gq_head=gq_h, gr_head=gr_h,
                    read_head_shape=tuple(read_h.shape), top_read=top_read, top_ids=top_ids, bytes=counter.bytes,
                    rows=(start, end), queries=(lo, hi)), os.path.join(out_dir, f"rank{rank}.pt"))
    dist.destroy_process_group()


@pytest.mark.parametrize("world", [2, 3])
def test_row_sharded_reads_and_gradients_equal_the_dense_computation(world, tmp_path):
    mp.spawn(_rank_main, args=(world, _free_port(), str(tmp_path)), nprocs=world, join=True)
    ref = _dense(world)
    full_gt, full_gt_head = torch.zeros(N, D, dtype=torch.float64), torch.zeros(N, D, dtype=torch.float64)
    sizes = []
    for rank in range(world):
        r = torch.load(tmp_path / f"rank{rank}.pt")
        lo, hi = r["queries"]
        start, end = r["rows"]
        sizes.append(end - start)
        close = dict(rtol=0, atol=1e-5)
        torch.testing.assert_close(r["lse"].double(), ref["lse"][lo:hi], **close)
        torch.testing.assert_close(r["read"].double(), ref["read"][lo:hi], **close)
        torch.testing.assert_close(r["score"].double(), ref["score"][lo:hi], **close)
        assert torch.equal(r["top1"], ref["top1"][lo:hi])
        torch.testing.assert_close(r["gq"].double(), ref["gq"][lo:hi], **close)
        torch.testing.assert_close(r["gq_head"].double(), ref["gq_head"][lo:hi], **close)
        assert r["gr"].shape == (end - start, D)  # the rank's rows only
        full_gt[start:end], full_gt_head[start:end] = r["gr"].double(), r["gr_head"].double()
        assert r["read_head_shape"] == (hi - lo, 0)
        torch.testing.assert_close(r["top_read"].double(), ref["top_read"][lo:hi], **close)
        assert torch.equal(r["top_ids"], ref["top_ids"][lo:hi])
        # What moved (one read, forward and backward) depends on the mentions and D only, never on N:
        # counts, queries, targets, max, [sum-exp, target score], argmax, reads; gradients in, query gradients out.
        k, m, mmax = world, sum(MENTIONS[world]), max(MENTIONS[world])
        assert r["bytes"] == (k * 8 + k * mmax * D * 4 + k * mmax * 8 + m * 4 + 2 * m * 4 + m * 8 + k * mmax * D * 4
                              + k * mmax * (D + 3) * 4 + k * mmax * D * 4)
    torch.testing.assert_close(full_gt, ref["gt"], rtol=0, atol=1e-5)
    torch.testing.assert_close(full_gt_head, ref["gt_head"], rtol=0, atol=1e-5)
    assert N % world and max(sizes) - min(sizes) == 1


def test_initial_rows_do_not_depend_on_the_partition():
    whole = init_rows(150_000, 4, 0, 150_000, 0.1, seed=3)
    for world in (2, 3, 7):
        parts = [init_rows(150_000, 4, *row_range(150_000, r, world), 0.1, seed=3) for r in range(world)]
        assert torch.equal(torch.cat(parts), whole)
    assert not torch.equal(init_rows(150_000, 4, 0, 10, 0.1, seed=4), whole[:10])
