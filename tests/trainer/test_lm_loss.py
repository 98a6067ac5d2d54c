"""trainer.lm_loss.linear_cross_entropy against F.cross_entropy over dense logits: loss, both gradients,
the argmax count; float64 exactly (ragged last chunk, ignored labels), bf16 within bf16's tolerance."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from trainer.lm_loss import linear_cross_entropy


def _case(n=37, d=16, vocab=53, dtype=torch.float64, ignored=(0, 5, 6, 36), seed=0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, d, generator=g, dtype=torch.float64)
    weight = torch.randn(vocab, d, generator=g, dtype=torch.float64) * 0.5
    labels = torch.randint(0, vocab, (n,), generator=g)
    labels[list(ignored)] = -100
    return hidden.to(dtype).requires_grad_(), weight.to(dtype).requires_grad_(), labels


def _dense(hidden, weight, labels):
    h, w = hidden.detach().double().requires_grad_(), weight.detach().double().requires_grad_()
    logits = h @ w.T
    loss = F.cross_entropy(logits, labels, reduction="sum")
    (2.5 * loss).backward()
    valid = labels != -100
    correct = ((logits.argmax(-1) == labels) & valid).sum()
    return loss.detach(), h.grad, w.grad, correct


@pytest.mark.parametrize("chunk_size", [1, 8, 37, 1000])  # ragged last chunk (37 = 4 x 8 + 5), one, all, one big
def test_float64_matches_dense_cross_entropy(chunk_size):
    hidden, weight, labels = _case()
    ref_loss, ref_gh, ref_gw, ref_correct = _dense(hidden, weight, labels)
    loss, correct = linear_cross_entropy(hidden, weight, labels, chunk_size=chunk_size, with_correct=True)
    (2.5 * loss).backward()  # the incoming gradient scales both saved gradients
    assert loss.dtype == torch.float64
    torch.testing.assert_close(loss, ref_loss, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(hidden.grad, ref_gh, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(weight.grad, ref_gw, rtol=1e-12, atol=1e-12)
    assert int(correct) == int(ref_correct)
    assert hidden.grad[[0, 5, 6, 36]].abs().max() == 0  # ignored tokens get no gradient


def test_bf16_close_to_float64_reference():
    hidden, weight, labels = _case(n=200, d=64, vocab=301, dtype=torch.bfloat16, ignored=(3, 150))
    ref_loss, ref_gh, ref_gw, _ = _dense(hidden, weight, labels)
    loss, _ = linear_cross_entropy(hidden, weight, labels, chunk_size=64)
    (2.5 * loss).backward()
    assert loss.dtype == torch.float32 and hidden.grad.dtype == weight.grad.dtype == torch.bfloat16
    torch.testing.assert_close(loss.double(), ref_loss, rtol=2e-3, atol=0)  # as close as dense bf16 logits are
    for got, ref in ((hidden.grad, ref_gh), (weight.grad, ref_gw)):
        err = (got.double() - ref).norm() / ref.norm()
        assert err < 1e-2, err


def test_autocast_runs_in_bf16_and_returns_float32_gradients():
    hidden, weight, labels = _case(dtype=torch.float32)
    ref_loss, _, ref_gw, _ = _dense(hidden, weight, labels)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, _ = linear_cross_entropy(hidden, weight, labels, chunk_size=8)
    (2.5 * loss).backward()
    assert weight.grad.dtype == torch.float32
    torch.testing.assert_close(loss.double(), ref_loss, rtol=3e-2, atol=0)
    assert (weight.grad.double() - ref_gw).norm() / ref_gw.norm() < 3e-2


def test_all_ignored_and_no_grad():
    hidden, weight, labels = _case(n=5, ignored=range(5))
    loss, correct = linear_cross_entropy(hidden, weight, labels, chunk_size=2, with_correct=True)
    loss.backward()
    assert float(loss.detach()) == 0 and int(correct) == 0
    assert hidden.grad.abs().max() == 0 and weight.grad.abs().max() == 0
    hidden, weight, labels = _case()
    with torch.no_grad():
        loss, _ = linear_cross_entropy(hidden, weight, labels, chunk_size=8)
    torch.testing.assert_close(loss, _dense(hidden, weight, labels)[0], rtol=1e-12, atol=1e-12)
    assert not loss.requires_grad


def test_bad_shapes_raise():
    hidden, weight, labels = _case()
    with pytest.raises(ValueError, match="labels \\[N\\]"):
        linear_cross_entropy(hidden, weight, labels[:-1])
    with pytest.raises(ValueError, match="chunk_size"):
        linear_cross_entropy(hidden, weight, labels, chunk_size=0)
