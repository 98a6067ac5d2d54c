"""The FlexAttention backend of the entity softmax (trainer/entity_flex.py) against float64 references.

FlexAttention's backward does not run on CPU, so here the chunked contract runs with ``reference_attend``
(dense per chunk, float64) in its place: the chunking and padding of the table and the queries, the merge
of the chunks, the gradient weights that turn each chunk's softmax into the global one, the target term,
accumulate, and the whole EntitySoftmax split by rows over 2 gloo ranks. CPU FlexAttention's forward is
checked against ``reference_attend`` where it runs. The ``gpu`` tests run the compiled FlexAttention at a
realistic shape against the documented bf16 tolerances (benchmarks/gpu_check.sh).
"""
from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tests.trainer.test_entity_kernels import BF16_TOL, _check_bf16, _dense_reference, _free_port, _problem, _rel
from trainer import entity_flex, entity_softmax
from trainer.entity_softmax import EntitySoftmax, _backward_blocks, _forward_blocks, blocked_entity_softmax
from trainer.memory import row_range

_CUDA = torch.cuda.is_available()


def _passes_equal_blocked(m, n, d, chunk, row_start):
    q, table, targets, *_ = _problem(m, n, d, seed=m + n)
    q, table = q.double(), table.double()
    # Ties across chunks: the lowest id wins. On a grid of 1/8 the tied rows' scores with q[0] are exact in
    # float64 whatever the order a matmul kernel sums them in (it varies with a row's place in a block and with
    # the CPU), so the three are equal, not equal up to the last bit.
    table[3] = (table[3] * 8).round() / 8
    table[n // 2] = table[n - 1] = table[3]
    q[0] = table[3] * 10
    kw = dict(attend=entity_flex.reference_attend, chunk=chunk)
    flex = entity_flex.forward_blocks(q, table, row_start, 0, True, torch.float64, **kw)
    exact = _forward_blocks(q, table, row_start, 64, True, torch.float64)
    for name, a, b in zip(("running max", "sum of exp", "read"), flex[:3], exact[:3]):
        assert _rel(a, b) < 1e-12, name
    assert torch.equal(flex[3], exact[3]) and flex[3][0] == row_start + 3
    no_read = entity_flex.forward_blocks(q, table, row_start, 0, False, torch.float64, **kw)
    assert no_read[2].shape == (m, 0) and _rel(no_read[1], exact[1]) < 1e-12
    lse, read = exact[0] + exact[1].log(), exact[2] / exact[1][:, None]
    g = torch.Generator().manual_seed(1)
    g_l, g_t = torch.randn(m, generator=g, dtype=torch.float64), torch.randn(m, generator=g, dtype=torch.float64)
    g_r = torch.randn(m, d, generator=g, dtype=torch.float64)
    local = targets.clone()
    local[-2:] = torch.tensor([-1, n])  # not owned by these rows
    for with_read in (True, False):
        args = (g_r if with_read else None, (g_r * read).sum(1) if with_read else None)
        grad_q, grad_rows = torch.zeros(m, d, dtype=torch.float64), torch.empty(n, d, dtype=torch.float64)
        _backward_blocks(q, table, lse, g_l, g_t, local, *args, 64, grad_q, grad_rows, False)
        f_grad_q = torch.ones(m, d, dtype=torch.float64)  # adds into it
        f_grad_rows = torch.full((n, d), float("nan"), dtype=torch.float64)  # every row must be written
        entity_flex.backward_blocks(q, table, lse, g_l, g_t, local, *args, 0, f_grad_q, f_grad_rows, False, **kw)
        assert _rel(f_grad_q - 1, grad_q) < 1e-12
        assert _rel(f_grad_rows, grad_rows) < 1e-12
        before = torch.randn(n, d, generator=g, dtype=torch.float64)
        acc = before.clone()
        entity_flex.backward_blocks(q, table, lse, g_l, g_t, local, *args, 0, torch.zeros(m, d, dtype=torch.float64),
                                    acc, True, **kw)
        assert _rel(acc - before, grad_rows) < 1e-12


@pytest.mark.parametrize("m,n,d,chunk,row_start", [(20, 300, 32, 64, 0), (45, 700, 40, 128, 700), (5, 50, 8, 64, 0)])
def test_chunked_passes_equal_the_blocked_passes_in_float64(m, n, d, chunk, row_start):
    """The contract of _forward_blocks/_backward_blocks term by term: a ragged last chunk (and a table smaller
    than one chunk), queries padded to QUERY_PAD, ties across chunks, targets outside the rows, accumulate."""
    _passes_equal_blocked(m, n, d, chunk, row_start)


def _flex_run(q, table, targets, w_lse, w_read, w_score, with_read=True, **kw):
    """EntitySoftmax on the 'flex' backend (on CPU: reference_attend in the inputs' dtype)."""
    q = q.detach().clone().requires_grad_()
    table = table.detach().clone().requires_grad_()
    lse, read, top1, score = EntitySoftmax.apply(q, table, targets, kw.get("row_start", 0), 64, with_read,
                                                 kw.get("group"), None, False, "flex")
    loss = (w_lse * lse + w_score * score).sum() + ((w_read * read).sum() if with_read else 0.0)
    grad_q, grad_rows = torch.autograd.grad(loss, (q, table))
    return dict(lse=lse, read=read, top1=top1, score=score, grad_query=grad_q, grad_rows=grad_rows)


def test_entity_softmax_on_flex_equals_float64_autograd(monkeypatch):
    """The model's use end to end on the flex backend, with a chunk smaller than the table: float64 equals the
    dense float64 autograd to 1e-10 (and float32 inputs meet the bf16 tolerances, which are looser)."""
    monkeypatch.setattr(entity_flex, "CHUNK_ROWS", 64)
    for with_read in (True, False):
        problem = _problem(33, 400, 16, seed=3)
        p64 = [t.double() if t.is_floating_point() else t for t in problem]
        out = _flex_run(*p64, with_read=with_read)
        ref = _dense_reference(*problem, with_read=with_read)
        for name in ("lse", "score", "grad_query", "grad_rows") + (("read",) if with_read else ()):
            assert _rel(out[name], ref[name]) < 1e-10, name
        assert torch.equal(out["top1"], ref["top1"])
        out32 = _flex_run(*problem, with_read=with_read)
        _check_bf16(out32, ref, with_read, q=problem[0], table=problem[1])


RANK_MENTIONS, RANK_N, RANK_D = [13, 6], 301, 32


def _rank_main(rank: int, world: int, port: int, out_dir: str):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    entity_flex.CHUNK_ROWS = 64  # several chunks per rank
    problem = [t.double() if t.is_floating_point() else t for t in _problem(sum(RANK_MENTIONS), RANK_N, RANK_D, seed=5)]
    q, table, targets, w_lse, w_read, w_score = problem
    lo, hi = sum(RANK_MENTIONS[:rank]), sum(RANK_MENTIONS[:rank + 1])
    start, end = row_range(RANK_N, rank, world)
    out = _flex_run(q[lo:hi], table[start:end], targets[lo:hi], w_lse[lo:hi], w_read[lo:hi], w_score[lo:hi],
                    row_start=start, group=dist.group.WORLD)
    torch.save(out, os.path.join(out_dir, f"rank{rank}.pt"))
    dist.destroy_process_group()


def test_rows_layout_on_two_ranks_with_flex(tmp_path):
    """Each gloo rank runs the chunked flex pass over its own rows (the lse standing in for the max in the merge
    of chunks, the true max for top1 across ranks); the shared cross-rank merge makes the whole-table result."""
    mp.spawn(_rank_main, args=(2, _free_port(), str(tmp_path)), nprocs=2, join=True)
    problem = _problem(sum(RANK_MENTIONS), RANK_N, RANK_D, seed=5)
    ref = _dense_reference(*problem)
    parts = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    out = {k: torch.cat([p[k] for p in parts]) for k in ("lse", "read", "top1", "score", "grad_query")}
    out["grad_rows"] = torch.cat([p["grad_rows"] for p in parts])  # each rank's own rows, in order
    for name in ("lse", "read", "score", "grad_query", "grad_rows"):
        assert _rel(out[name], ref[name]) < 1e-10, name
    assert torch.equal(out["top1"], ref["top1"])


def test_cpu_flex_attention_forward_equals_the_reference():
    """torch's FlexAttention (eager, forward only: its backward needs CUDA) computes what reference_attend does,
    padding mask included: the lse in natural log, the read per chunk."""
    pytest.importorskip("torch.nn.attention.flex_attention")
    from torch.nn.attention.flex_attention import AuxRequest, flex_attention

    g = torch.Generator().manual_seed(0)
    m, d, chunk, n = 16, 32, 64, 150
    q = torch.randn(m, d, generator=g)
    kv = entity_flex.chunk_rows(torch.randn(n, d, generator=g) * d ** -0.5, torch.float32, chunk)
    valid = torch.tensor(n)

    def mask_padding(score, b, h, q_idx, kv_idx):
        return torch.where(h * chunk + kv_idx < valid, score, -float("inf"))

    c = kv.shape[0]
    out, aux = flex_attention(q[None, None].expand(1, c, m, d).contiguous(), kv[None], kv[None],
                              score_mod=mask_padding, scale=1.0, return_aux=AuxRequest(lse=True))
    read_ref, lse_ref = entity_flex.reference_attend(q.double(), kv.double(), n)
    assert _rel(aux.lse[0], lse_ref) < 1e-5
    assert _rel(out[0], read_ref) < 1e-5


def test_flex_is_refused_on_cpu_and_for_float64():
    q, table = torch.randn(3, 16), torch.randn(40, 16)
    with pytest.raises(ValueError, match="flex"):
        blocked_entity_softmax(q, table, kernel="flex")
    assert "float64" in entity_flex.unsupported_reason(q.double(), table.double())


# ---------------------------------------------------------------------------------------------- GPU

@pytest.mark.gpu
@pytest.mark.skipif(not _CUDA, reason="needs a CUDA GPU")
@pytest.mark.parametrize("table_dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("with_read", [True, False])
def test_gpu_flex_at_a_realistic_shape(table_dtype, with_read):
    """M=768 mentions over 65,536 + 77 x 256 rows (a ragged last chunk), compiled FlexAttention: the documented
    bf16 tolerances against float64."""
    problem = _problem(768, 65536 + 77, 256, seed=6, table_dtype=table_dtype, device="cuda")
    q, table, targets, w_lse, w_read, w_score = problem
    qq, tt = q.detach().clone().requires_grad_(), table.detach().clone().requires_grad_()
    lse, read, top1, score = blocked_entity_softmax(qq, tt, 8192, targets, with_read, kernel="flex")
    loss = (w_lse * lse + w_score * score).sum() + ((w_read * read).sum() if with_read else 0.0)
    grad_q, grad_rows = torch.autograd.grad(loss, (qq, tt))
    assert "flex" not in entity_softmax._FAILED, f"FlexAttention fell back to the blocked path: {entity_softmax._FAILED}"
    out = dict(lse=lse, read=read, top1=top1, score=score, grad_query=grad_q, grad_rows=grad_rows)
    ref = _dense_reference(*problem, with_read=with_read)
    _check_bf16(out, ref, with_read, q=q, table=table)
    assert set(BF16_TOL) <= set(out)
