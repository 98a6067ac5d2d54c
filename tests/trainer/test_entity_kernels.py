"""The Triton entity-softmax kernels against float64 references.

Without CUDA they run under Triton's interpreter on CPU tensors, in a Python of their own started with
TRITON_INTERPRET=1 (``_interpreted``), at small shapes with ragged last tiles (the interpreter's tiles
are 32 queries x 64 rows): the kernel passes must equal the blocked passes of trainer.entity_softmax
with float32 products, and the whole EntitySoftmax on the kernel must meet the documented bfloat16
tolerances, also split by rows over 2 gloo ranks. The ``gpu`` tests run the compiled kernels at a
realistic shape (benchmarks/gpu_check.sh).
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

pytest.importorskip("triton")

from trainer import entity_kernels, entity_softmax  # noqa: E402
from trainer.entity_softmax import (  # noqa: E402
    _backward_blocks,
    _forward_blocks,
    blocked_entity_softmax,
    dense_entity_softmax,
    resolve_kernel,
)
from trainer.memory import row_range  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
_CUDA = torch.cuda.is_available() and not entity_kernels.INTERPRET
needs_cuda = pytest.mark.skipif(not _CUDA, reason="needs a CUDA GPU")
on_cpu = pytest.mark.skipif(_CUDA, reason="the kernels are compiled here (CUDA): the gpu tests cover them")


def _interpreted(check: str, *args) -> None:
    """Run ``check(*args)`` of this module in a fresh Python with TRITON_INTERPRET=1.

    Triton reads the variable when it decorates a kernel, its own library's included, at its first import; in a
    pytest process DeepSpeed has imported it long before (compiled mode), hence a process of its own."""
    if entity_kernels.INTERPRET:  # already one (this module imported under the variable)
        globals()[check](*args)
        return
    code = f"import torch\nfrom tests.trainer.test_entity_kernels import {check}\n{check}(*{args!r})"
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, f"{check}{args} failed under the interpreter:\n{proc.stderr[-6000:]}"


# The documented bfloat16 tolerances (trainer/entity_kernels.py): relative, ||x - ref|| / ||ref||.
BF16_TOL = dict(lse=5e-4, read=1e-2, score=1e-5, grad_query=1e-2, grad_rows=1e-2)


def _rel(x: torch.Tensor, ref: torch.Tensor) -> float:
    return ((x.double() - ref).norm() / ref.norm()).item()


def _problem(m: int, n: int, d: int, seed: int, table_dtype=torch.float32, device="cpu"):
    """Unit-variance queries and unit-norm rows (the model's initial scales); targets on tile edges."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(m, d, generator=g)
    table = (torch.randn(n, d, generator=g) * d ** -0.5).to(table_dtype)
    targets = torch.randint(0, n, (m,), generator=g)
    edges = torch.tensor([0, 31, 32, 63, 64, 127, 128, n - 1])  # edges of the tiles of queries and of rows
    targets[:len(edges)] = edges[:m]
    w_lse, w_read, w_score = (torch.randn(m, generator=g), torch.randn(m, d, generator=g) * d ** -0.5,
                              torch.randn(m, generator=g))
    return [t.to(device) for t in (q, table, targets, w_lse, w_read, w_score)]


def _dense_reference(q, table, targets, w_lse, w_read, w_score, with_read=True):
    """float64 autograd through the dense [M, N] computation: values and gradients of
    sum(w_lse * lse + w_score * target score + w_read . read)."""
    q64 = q.detach().double().requires_grad_()
    t64 = table.detach().double().requires_grad_()
    lse, read, top1 = dense_entity_softmax(q64, t64)
    score = (q64 * t64[targets]).sum(1)
    loss = (w_lse.double() * lse + w_score.double() * score).sum()
    if with_read:
        loss = loss + (w_read.double() * read).sum()
    grad_q, grad_rows = torch.autograd.grad(loss, (q64, t64))
    scores = q64.detach() @ t64.detach().T
    return dict(lse=lse.detach(), read=read.detach(), top1=top1, score=score.detach(), grad_query=grad_q,
                grad_rows=grad_rows, scores=scores)


def _kernel_run(q, table, targets, w_lse, w_read, w_score, with_read=True, **kw):
    q = q.detach().clone().requires_grad_()
    table = table.detach().clone().requires_grad_()
    lse, read, top1, score = blocked_entity_softmax(q, table, 64, targets, with_read, kernel="triton", **kw)
    loss = (w_lse * lse + w_score * score).sum() + ((w_read * read).sum() if with_read else 0.0)
    grad_q, grad_rows = torch.autograd.grad(loss, (q, table))
    assert "triton" not in entity_softmax._FAILED, f"the kernels fell back to the blocked path: {entity_softmax._FAILED}"
    return dict(lse=lse, read=read, top1=top1, score=score, grad_query=grad_q, grad_rows=grad_rows)


def _check_bf16(out, ref, with_read=True, q=None, table=None):
    """The documented tolerances, and top1: an entity whose exact score is within the products' rounding of the max."""
    for name, tol in BF16_TOL.items():
        if name == "read" and not with_read:
            assert out["read"].shape == (out["lse"].shape[0], 0)
            continue
        err = _rel(out[name], ref[name])
        assert err < tol, f"{name}: relative error {err:.2e} >= {tol:.0e}"
    # |error of a bf16-product score| <= ~2^-8 ||q|| ||e||: the lse's error is bounded by the worst score's
    bound = 2 ** -8 * q.double().norm(dim=1) * table.double().norm(dim=1).max() + 1e-5
    assert ((out["lse"].double() - ref["lse"]).abs() <= bound).all()
    chosen = ref["scores"].gather(1, out["top1"][:, None])[:, 0]
    assert ((ref["scores"].max(dim=1).values - chosen) <= 2 * bound).all()


# ---------------------------------------------------------------------------------------------- interpreter

@on_cpu
def test_kernel_passes_equal_the_blocked_passes_with_float32_products():
    """The contract of _forward_blocks/_backward_blocks, term by term, with float32 products: the tiling,
    the split over chunks and their merge, masks of ragged tiles, targets on tile edges and outside the rows."""
    _interpreted("_check_passes", 20, 300, 32, 0)
    _interpreted("_check_passes", 45, 700, 40, 700)


def _check_passes(m, n, d, row_start):
    q, table, targets, *_ = _problem(m, n, d, seed=m)
    # ties: row 3's copies in another tile and in the last one; query 0 points at them -> the lowest id wins. On a
    # grid of 1/8 their scores with q[0] are exact whatever order a kernel sums them in (test_entity_flex.py)
    table[3] = (table[3] * 8).round() / 8
    table[n // 2] = table[n - 1] = table[3]
    q[0] = table[3] * 10
    g = torch.Generator().manual_seed(1)
    kernel = entity_kernels.forward_blocks(q, table, row_start, 0, True, torch.float32, products="fp32")
    exact = _forward_blocks(q.double(), table.double(), row_start, 64, True, torch.float64)
    names = ("running max", "sum of exp", "read")
    for name, a, b in zip(names, kernel[:3], exact[:3]):
        assert _rel(a, b) < 1e-5, name
    assert torch.equal(kernel[3], exact[3]) and kernel[3][0] == row_start + 3
    lse = exact[0] + exact[1].log()
    read = exact[2] / exact[1][:, None]
    g_l, g_t, g_r = torch.randn(m, generator=g), torch.randn(m, generator=g), torch.randn(m, d, generator=g)
    local = targets.clone()
    local[-2:] = torch.tensor([-1, n])  # not owned by these rows
    for with_read in (True, False):
        grad_q, grad_rows = torch.zeros(m, d, dtype=torch.float64), torch.empty(n, d, dtype=torch.float64)
        _backward_blocks(q.double(), table.double(), lse, g_l.double(), g_t.double(), local,
                         g_r.double() if with_read else None, (g_r.double() * read).sum(1) if with_read else None,
                         64, grad_q, grad_rows, False)
        k_grad_q = torch.ones(m, d)  # the kernel adds into it
        k_grad_rows = torch.full((n, d), float("nan"))  # every row must be written
        entity_kernels.backward_blocks(q, table, lse.float(), g_l, g_t, local, g_r if with_read else None,
                                       (g_r * read.float()).sum(1) if with_read else None, 0, k_grad_q,
                                       k_grad_rows, False, products="fp32")
        assert _rel(k_grad_q - 1, grad_q) < 1e-5
        assert _rel(k_grad_rows, grad_rows) < 1e-5
        if not with_read:
            continue
        # accumulate: added into what is there
        before = torch.randn(n, d, generator=g)
        acc = before.clone()
        entity_kernels.backward_blocks(q, table, lse.float(), g_l, g_t, local, g_r if with_read else None,
                                       (g_r * read.float()).sum(1) if with_read else None, 0, torch.zeros(m, d),
                                       acc, True, products="fp32")
        assert _rel(acc - before, grad_rows) < 1e-5


@on_cpu
def test_entity_softmax_on_the_kernel_meets_the_bf16_tolerances():
    """The model's use end to end (kernel='triton'), with and without the read, then a bf16 table (its values
    exact in the reference) and accumulate_grad into a float32 leaf's .grad: against float64 autograd."""
    _interpreted("_check_entity_softmax")


def _check_entity_softmax():
    for with_read in (True, False):
        problem = _problem(33, 400, 64, seed=3)
        out = _kernel_run(*problem, with_read=with_read)
        ref = _dense_reference(*problem, with_read=with_read)
        _check_bf16(out, ref, with_read, q=problem[0], table=problem[1])
        assert out["lse"].dtype == torch.float32 and out["grad_rows"].dtype == torch.float32
    q, table, targets, w_lse, w_read, w_score = _problem(24, 300, 32, seed=4, table_dtype=torch.bfloat16)
    out = _kernel_run(q, table, targets, w_lse, w_read, w_score)
    ref = _dense_reference(q, table, targets, w_lse, w_read, w_score)
    _check_bf16(out, ref, q=q, table=table)
    assert out["grad_rows"].dtype == torch.bfloat16
    leaf = table.float().requires_grad_()
    leaf.grad = torch.ones_like(leaf)
    lse, read, _, score = blocked_entity_softmax(q, leaf, 64, targets, True, accumulate_grad=True, kernel="triton")
    torch.autograd.backward((w_lse * lse + w_score * score).sum() + (w_read * read).sum())
    assert _rel(leaf.grad - 1, ref["grad_rows"]) < BF16_TOL["grad_rows"]


@on_cpu
def test_float32_merge_of_partials_ignores_autocast():
    """Under bf16 autocast (the trainer's bf16 step) the merge of the forward's partials stays float32: with
    float32 products the read must still match float64 to 1e-5 (a bf16 einsum misses by ~1e-3)."""
    _interpreted("_check_merge_under_autocast")


def _check_merge_under_autocast():
    q, table, *_ = _problem(40, 700, 32, seed=11)
    exact = _forward_blocks(q.double(), table.double(), 0, 64, True, torch.float64)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        kernel = entity_kernels.forward_blocks(q, table, 0, 0, True, torch.float32, products="fp32")
        g = torch.Generator().manual_seed(2)
        g_l, g_t, g_r = torch.randn(40, generator=g), torch.randn(40, generator=g), torch.randn(40, 32, generator=g)
        lse, read = exact[0] + exact[1].log(), exact[2] / exact[1][:, None]
        grad_q = torch.zeros(40, 32)
        entity_kernels.backward_blocks(q, table, lse.float(), g_l, g_t, torch.zeros(40, dtype=torch.long), g_r,
                                       (g_r * read.float()).sum(1), 0, grad_q, None, False, products="fp32")
    for a, b in zip(kernel[:3], exact[:3]):
        assert a.dtype == torch.float32 and _rel(a, b) < 1e-5
    ref_q = torch.zeros(40, 32, dtype=torch.float64)
    _backward_blocks(q.double(), table.double(), lse, g_l.double(), g_t.double(), torch.zeros(40, dtype=torch.long),
                     g_r.double(), (g_r.double() * read).sum(1), 64, ref_q, None, False)
    assert grad_q.dtype == torch.float32 and _rel(grad_q, ref_q) < 1e-5


def test_float32_products_read_float32_inputs_on_a_gpu():
    """products='fp32' is float32 all the way: the queries and upstream gradients are NOT cast to bf16 on
    CUDA (they were, so the float32 check ran with bf16 inputs: ~5e-4 against its 1e-5 bound)."""
    if entity_kernels.INTERPRET:
        pytest.skip("the interpreter reads float32 either way")
    cuda = torch.device("cuda")
    assert entity_kernels._input_dtype(cuda, bf16=False) == torch.float32
    assert entity_kernels._input_dtype(cuda, bf16=True) == torch.bfloat16
    assert entity_kernels._input_dtype(torch.device("cpu"), bf16=True) == torch.float32


def test_compile_errors_become_kernel_unavailable(monkeypatch):
    """Out of shared memory -> the next tile; any other error of the machine's Triton -> KernelUnavailable
    (EntitySoftmax falls back on it); device OOM is not hidden."""
    from triton.runtime.errors import OutOfResources

    if entity_kernels.INTERPRET:
        pytest.skip("the interpreter runs its own tile")
    monkeypatch.setattr(entity_kernels, "_working", {})
    tried = []

    def too_big_then_fine(*tile):
        tried.append(tile)
        if len(tried) == 1:
            raise OutOfResources(300000, 232448, "shared memory")
        return "ran"

    assert entity_kernels._launch_here("forward", ("k",), too_big_then_fine, None) == "ran"
    assert tried == entity_kernels.TILES["forward"][:2]

    def ptxas_fails(*tile):
        raise RuntimeError("PTXAS error: Internal Triton PTX codegen error")

    with pytest.raises(entity_kernels.KernelUnavailable, match="PTXAS"):
        entity_kernels._launch_here("rows", ("k2",), ptxas_fails, None)

    def never_fits(*tile):
        raise OutOfResources(300000, 232448, "shared memory")

    with pytest.raises(entity_kernels.KernelUnavailable, match="no queries tile config fits"):
        entity_kernels._launch_here("queries", ("k3",), never_fits, None)

    def oom(*tile):
        raise torch.OutOfMemoryError("CUDA out of memory")

    with pytest.raises(torch.OutOfMemoryError):
        entity_kernels._launch_here("queries", ("k4",), oom, None)


def test_entity_softmax_falls_back_to_blocked_when_the_kernel_cannot_compile(monkeypatch):
    """A KernelUnavailable in the forward or the backward: the blocked pass runs instead (same results as
    kernel='blocked'), with one warning, and the failed backend is not tried again in this process."""
    from trainer import entity_softmax as es

    monkeypatch.setattr(es, "_FAILED", {})
    calls = []

    def broken(*args, **kw):
        calls.append(1)
        raise es.KernelUnavailable("ptxas says no")

    monkeypatch.setattr(entity_kernels, "forward_blocks", broken)
    monkeypatch.setattr(entity_kernels, "backward_blocks", broken)
    q, table, targets, w_lse, w_read, w_score = _problem(9, 200, 16, seed=12)

    def run(kernel):
        qq, tt = q.clone().requires_grad_(), table.clone().requires_grad_()
        lse, read, top1, score = es.EntitySoftmax.apply(qq, tt, targets, 0, 64, True, None, None, False, kernel)
        ((w_lse * lse + w_score * score).sum() + (w_read * read).sum()).backward()
        return lse, read, top1, score, qq.grad, tt.grad

    with pytest.warns(RuntimeWarning, match="ptxas says no"):
        got = run("triton")
    want = run("blocked")
    for a, b in zip(got, want):
        assert torch.equal(a, b)
    assert len(calls) == 1 and "triton" in es._FAILED  # the backward did not try again
    assert es.resolve_kernel("triton", q, table) == "blocked"  # nor does the next read
    # a backward that fails after a forward that ran: the blocked backward, same gradients
    monkeypatch.setattr(es, "_FAILED", {})
    monkeypatch.setattr(entity_kernels, "forward_blocks", es._forward_blocks)
    with pytest.warns(RuntimeWarning, match="ptxas says no"):
        got = run("triton")
    for a, b in zip(got, want):
        assert torch.equal(a, b)


def test_mention_count_is_not_specialised_and_programs_follow_registers():
    """M changes every step: no kernel specialises on it (one compile, not two or three). Programs per SM from
    the compiled kernel's registers: 255 registers x 8 warps fill an SM's 64K alone."""
    for kernel in (entity_kernels._forward_kernel, entity_kernels._backward_rows_kernel,
                   entity_kernels._backward_queries_kernel):
        assert "M" in kernel.do_not_specialize
    assert entity_kernels.blocks_per_sm(255, 8) == 1
    assert entity_kernels.blocks_per_sm(255, 4) == 2
    assert entity_kernels.blocks_per_sm(128, 4) == 4
    assert entity_kernels.blocks_per_sm(64, 4, shared_bytes=100 * 1024) == 2  # shared memory limits first
    assert entity_kernels.DEFAULT_PROGRAMS_PER_SM == 1


def test_auto_takes_the_blocked_path_on_cpu_and_triton_refuses_float64():
    q, table = torch.randn(3, 16), torch.randn(40, 16)
    assert resolve_kernel("auto", q, table) == "blocked"
    assert resolve_kernel("blocked", q, table) == "blocked"
    with pytest.raises(ValueError, match="float64"):
        resolve_kernel("triton", q.double(), table.double())
    with pytest.raises(ValueError, match="must be one of"):
        resolve_kernel("flash", q, table)
    if not torch.cuda.is_available() and not entity_kernels.INTERPRET:
        with pytest.raises(ValueError, match="need CUDA"):
            resolve_kernel("triton", q, table)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


RANK_MENTIONS, RANK_N, RANK_D = [13, 6], 301, 32


def _rank_main(rank: int, world: int, port: int, out_dir: str):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    q, table, targets, w_lse, w_read, w_score = _problem(sum(RANK_MENTIONS), RANK_N, RANK_D, seed=5)
    lo, hi = sum(RANK_MENTIONS[:rank]), sum(RANK_MENTIONS[:rank + 1])
    start, end = row_range(RANK_N, rank, world)
    out = _kernel_run(q[lo:hi], table[start:end], targets[lo:hi], w_lse[lo:hi], w_read[lo:hi], w_score[lo:hi],
                      row_start=start, group=dist.group.WORLD)
    torch.save(dict(out, rows=(start, end), queries=(lo, hi)), os.path.join(out_dir, f"rank{rank}.pt"))
    dist.destroy_process_group()


@on_cpu
def test_rows_layout_on_two_ranks_with_the_kernel(tmp_path):
    """Each gloo rank runs the kernel over its own rows; the shared cross-rank merge makes the whole-table result."""
    _interpreted("_check_rows_layout", str(tmp_path))


def _check_rows_layout(out_dir):
    tmp_path = Path(out_dir)
    mp.spawn(_rank_main, args=(2, _free_port(), out_dir), nprocs=2, join=True)  # the ranks inherit the variable
    problem = _problem(sum(RANK_MENTIONS), RANK_N, RANK_D, seed=5)
    ref = _dense_reference(*problem)
    parts = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    out = {k: torch.cat([p[k] for p in parts]) for k in ("lse", "read", "top1", "score", "grad_query", "grad_rows")}
    assert [p["rows"] for p in parts] == [(0, 150), (150, 301)]
    _check_bf16(out, ref, q=problem[0], table=problem[1])


# ---------------------------------------------------------------------------------------------- GPU

@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("table_dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("with_read", [True, False])
def test_gpu_kernel_at_a_realistic_shape(table_dtype, with_read):
    """M=768 mentions over 65,536 x 256 rows: the documented bf16 tolerances against float64."""
    problem = _problem(768, 65536, 256, seed=6, table_dtype=table_dtype, device="cuda")
    out = _kernel_run(*problem, with_read=with_read)
    ref = _dense_reference(*problem, with_read=with_read)
    _check_bf16(out, ref, with_read, q=problem[0], table=problem[1])


@pytest.mark.gpu
@needs_cuda
def test_gpu_kernels_record_their_registers_and_size_the_grid_by_them():
    """After a launch each kernel's compiled registers, spills and resident programs per SM are known (the
    benchmark's sweep reports them), and the next launch sizes its row chunks by them."""
    problem = _problem(768, 65536, 256, seed=9, device="cuda")
    _kernel_run(*problem)
    kinds = {key[0] for key in entity_kernels._compiled}
    assert kinds == {"forward", "rows", "queries"}, kinds
    for info in entity_kernels._compiled.values():
        assert 0 < info["n_regs"] <= 255 and info["programs_per_sm"] >= 1


@pytest.mark.gpu
@needs_cuda
def test_gpu_kernel_passes_with_float32_products_equal_float64():
    """The same tiles and chunks with float32 products: a lost tile or a wrong rescale shows at 1e-5, not hidden
    by bf16 rounding. D=64: float32 products at D=256 take minutes to compile and test nothing more."""
    m, n, d = 768, 65536 + 77, 64
    q, table, targets, *_ = _problem(m, n, d, seed=7, device="cuda")
    kernel = entity_kernels.forward_blocks(q, table, 0, 0, True, torch.float32, products="fp32")
    exact = _forward_blocks(q.double(), table.double(), 0, 8192, True, torch.float64)
    for a, b in zip(kernel[:3], exact[:3]):
        assert _rel(a, b) < 1e-5
    assert (kernel[3] == exact[3]).float().mean() > 0.999  # float32 ties aside
    lse = exact[0] + exact[1].log()
    read = exact[2] / exact[1][:, None]
    g = torch.Generator(device="cuda").manual_seed(8)
    g_l, g_t = torch.randn(m, generator=g, device="cuda"), torch.randn(m, generator=g, device="cuda")
    g_r = torch.randn(m, d, generator=g, device="cuda")
    grad_q, grad_rows = torch.zeros(m, d, dtype=torch.float64, device="cuda"), torch.empty(n, d, dtype=torch.float64,
                                                                                             device="cuda")
    _backward_blocks(q.double(), table.double(), lse, g_l.double(), g_t.double(), targets, g_r.double(),
                     (g_r.double() * read).sum(1), 8192, grad_q, grad_rows, False)
    k_grad_q, k_grad_rows = torch.zeros(m, d, device="cuda"), torch.full((n, d), float("nan"), device="cuda")
    entity_kernels.backward_blocks(q, table, lse.float(), g_l, g_t, targets, g_r, (g_r * read.float()).sum(1), 0,
                                   k_grad_q, k_grad_rows, False, products="fp32")
    assert _rel(k_grad_q, grad_q) < 1e-5
    assert _rel(k_grad_rows, grad_rows) < 1e-5


def test_benchmark_runs_here(tmp_path):
    """benchmarks/bench_entity_softmax.py at a tiny size: the blocked path on CPU (all variants on a GPU), JSON out."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import bench_entity_softmax
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    out = tmp_path / "bench.json"
    bench_entity_softmax.main(["--mentions", "8", "--entities", "300", "--dim", "32", "--block_size", "128",
                               "--repeat", "2", "--warmup", "1", "--json", str(out)])
    summary = json.loads(out.read_text())
    assert summary["results"]["blocked_fp32"]["ratio_to_blocked_fp32"] == 1.0
    assert len(summary["results"]["blocked_fp32"]["times_ms"]) == 2
    assert ("triton" in summary["results"]) == _CUDA


def test_model_memory_kernel_reaches_the_softmax():
    """model.memory_kernel goes from the config through EntityMemory to the softmax: on CPU an explicit 'triton'
    (outside the interpreter) refuses with the reason, 'auto' reads on the blocked path; a bad name is refused."""
    from trainer.config import load_config
    from trainer.model import EntityMemory

    q, targets = torch.randn(5, 16), torch.tensor([0, 1, 2, 3, 39])
    auto = EntityMemory(40, 16, 8, 0, kernel=load_config(None, ["--model.memory_kernel", "auto"]).model.memory_kernel)
    torch.nn.init.normal_(auto.table)
    read, lse, _, _ = auto(q, targets)
    assert read.shape == (5, 16) and torch.isfinite(lse).all()
    if not torch.cuda.is_available() and not entity_kernels.INTERPRET:
        forced = EntityMemory(40, 16, 8, 0, kernel="triton")
        torch.nn.init.normal_(forced.table)
        with pytest.raises(ValueError, match="need CUDA"):
            forced(q, targets)
    with pytest.raises(SystemExit, match="memory_kernel"):
        load_config(None, ["--model.memory_kernel", "flash"])
