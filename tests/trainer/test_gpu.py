"""The trainer's GPU path (benchmarks/gpu_check.sh runs these; skipped without CUDA): the chunked LM loss
in bf16 at a real size (agreement and memory), compiled layers (inductor) against eager in bf16, and the
tiny config trained in bf16 with compiled layers on padded batches: entity linking still reaches 90%.

On a machine without Apache Beam the trainer tests need a finished corpus: WIKIEDM_TRAINER_CORPUS=OUT.
"""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

GPU_RUN_ARGS = ("--train.plot", "false")  # what a GPU run adds to tests/trainer/runs.py's command

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def test_linear_cross_entropy_bf16_agrees_and_keeps_memory_down():
    from trainer.lm_loss import linear_cross_entropy

    torch.manual_seed(0)
    n, d, vocab = 8192, 1024, 50265
    hidden = torch.randn(n, d, device="cuda", dtype=torch.bfloat16).requires_grad_()
    weight = (torch.randn(vocab, d, device="cuda", dtype=torch.bfloat16) * 0.02).requires_grad_()
    labels = torch.randint(0, vocab, (n,), device="cuda")
    labels[::7] = -100

    def peak(fn):
        hidden.grad = weight.grad = None
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        loss = fn()
        loss.backward()
        torch.cuda.synchronize()
        return loss.detach(), hidden.grad.clone(), weight.grad.clone(), torch.cuda.max_memory_allocated() - base

    dense = peak(lambda: F.cross_entropy(F.linear(hidden, weight).float(), labels, reduction="sum"))
    chunked = peak(lambda: linear_cross_entropy(hidden, weight, labels)[0])
    h64, w64 = hidden.detach().double().requires_grad_(), weight.detach().double().requires_grad_()
    ref = F.cross_entropy(h64 @ w64.T, labels, reduction="sum")
    ref.backward()
    torch.testing.assert_close(chunked[0].double(), ref.detach(), rtol=1e-3, atol=0)
    for got, want in ((chunked[1], h64.grad), (chunked[2], w64.grad)):
        assert (got.double() - want).norm() / want.norm() < 2e-2
    assert chunked[3] < dense[3] / 2, (chunked[3], dense[3])


def test_compiled_layers_equal_eager_in_bf16():
    from tests.trainer.test_speed import _batch, _model
    from trainer.speed import compile_layers

    eager = _model().cuda().to(torch.bfloat16)
    compiled = copy.deepcopy(eager)
    compile_layers(compiled)
    batch = {k: v.cuda() for k, v in _batch(8, 64).items()}
    losses = []
    for model in (eager, compiled):
        out = model(**batch)
        out["loss"].backward()
        losses.append(out["loss"].detach().float())
    torch.testing.assert_close(losses[1], losses[0], rtol=2e-2, atol=0)
    for (name, p), (_, q) in zip(eager.named_parameters(), compiled.named_parameters()):
        if p.grad is not None and p.grad.norm() > 0:
            assert (q.grad.float() - p.grad.float()).norm() / p.grad.float().norm() < 5e-2, name


@pytest.mark.slow
def test_bf16_compiled_trainer_links_entities(corpus_dir, tmp_path):
    from tests.trainer.runs import STEPS, el_accuracy, run, train_rows

    # no plot: the GPU machine may lack matplotlib, and plot_losses imports it at the end of the run
    d = run(corpus_dir, tmp_path / "bf16", 1, "--train.bf16", "true", "--train.compile", "auto", *GPU_RUN_ARGS)
    log = (d / "stdout.log").read_text()
    assert "bf16 True, compile True" in log and "weights in torch.bfloat16" in log
    rows = train_rows(d)
    last = range(STEPS - 4, STEPS + 1)
    for read in ("enc", "dec", "head"):
        assert el_accuracy(rows, last, read) >= 0.9, read
    assert rows[STEPS]["mfu"] > 0


def test_micro_batch_probe_on_the_gpu():
    from tests.trainer.test_speed import Ids, _model
    from trainer.speed import probe_batch, resolve_micro_batch

    model = _model().cuda().to(torch.bfloat16)
    tried = []

    def try_step(b):
        tried.append(b)
        model(**probe_batch(b, 64, Ids, 100, 5, "cuda"))["loss"].backward()
        model.zero_grad(set_to_none=True)

    assert resolve_micro_batch(48, torch.device("cuda"), try_step, model.num_parameters(), True) == 16
    assert tried == [1, 2, 4, 8, 16]  # the powers of two dividing 48, all of which fit
