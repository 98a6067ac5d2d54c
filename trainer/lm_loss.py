"""The LM head and its cross-entropy in one pass over chunks of tokens: no [tokens x vocab] logits in memory.

``F.cross_entropy(F.linear(h, W).float(), y)`` keeps the whole logit matrix alive for the
backward: at a micro-batch of 128 x 160 tokens and a vocabulary of 50,265 that is ~4 GB in
float32 (plus its bf16 copy and the softmax gradient of the same size). ``linear_cross_entropy``
walks the tokens in chunks instead (Liger's fused linear cross-entropy, cut-cross-entropy): per
chunk it computes the logits in the weights' dtype, their log-sum-exp with float32 sums, the loss,
and right away the chunk's gradients for the hidden states and the weight (the softmax minus the
one-hot target, times W and times h). Only those gradients are kept for the backward, which
scales them by the incoming gradient: peak memory is one chunk's logits, not all of them.

The matmuls are the ones the dense loss does (forward logits, backward dL/dh and dL/dW), moved into
the forward; when no gradient is needed (validation) the gradient matmuls are skipped.
"""
from __future__ import annotations

import torch

IGNORE_INDEX = -100


def _chunk_loss(h: torch.Tensor, weight: torch.Tensor, y: torch.Tensor, ignore_index: int, with_grad: bool,
                with_correct: bool):
    """One chunk: -> summed CE (float32 or float64), correct argmax count (or 0), d(sum CE)/d logits (weight dtype)
    or None.

    The [n, V] work stays in the weights' dtype and in place (no float32 copy of bf16 logits): the row
    maximum is exact, exp(logits - max) is summed in float32, so the log-sum-exp is float32-accurate; the
    gradient softmax - one_hot is formed from the same exponentials, in the dtype it is returned in.
    """
    logits = h @ weight.T  # [n, V] in the weights' dtype (float32 accumulation inside the matmul)
    acc_dtype = torch.float64 if logits.dtype == torch.float64 else torch.float32
    valid = y != ignore_index
    target = torch.where(valid, y, 0)
    target_logit = logits.gather(1, target[:, None]).squeeze(1).to(acc_dtype)
    correct = ((logits.argmax(dim=-1) == y) & valid).sum() if with_correct else 0  # one more pass over the logits
    row_max = logits.amax(dim=-1, keepdim=True)
    exp = logits.sub_(row_max).exp_()  # in place: the logits are not needed any more
    sum_exp = exp.sum(dim=-1, dtype=acc_dtype)
    lse = row_max.squeeze(1).to(acc_dtype) + sum_exp.log()
    loss = ((lse - target_logit) * valid).sum()
    grad_logits = None
    if with_grad:  # softmax - one_hot(target), zero on ignored rows
        grad_logits = exp.mul_(sum_exp.reciprocal()[:, None].to(exp.dtype))
        grad_logits.scatter_add_(1, target[:, None], torch.full_like(target[:, None], -1, dtype=exp.dtype))
        grad_logits.mul_(valid[:, None])
    return loss, correct, grad_logits


class LinearCrossEntropy(torch.autograd.Function):
    """sum over tokens of CE(h W^T, y), with the gradients computed chunk by chunk in the forward."""

    @staticmethod
    def forward(ctx, hidden, weight, labels, chunk_size: int, ignore_index: int, with_grad: bool, with_correct: bool):
        n = hidden.shape[0]
        acc_dtype = torch.float64 if weight.dtype == torch.float64 else torch.float32
        loss = torch.zeros((), dtype=acc_dtype, device=hidden.device)
        correct = torch.zeros((), dtype=torch.long, device=hidden.device)
        grad_hidden = torch.empty_like(hidden) if with_grad else None
        # float32 accumulation of the weight's gradient over the chunks
        grad_weight = torch.zeros(weight.shape, dtype=acc_dtype, device=weight.device) if with_grad else None
        for start in range(0, n, chunk_size):
            h, y = hidden[start:start + chunk_size], labels[start:start + chunk_size]
            chunk_loss, chunk_correct, g = _chunk_loss(h, weight, y, ignore_index, with_grad, with_correct)
            loss += chunk_loss
            correct += chunk_correct
            if with_grad:
                torch.matmul(g, weight, out=grad_hidden[start:start + chunk_size])
                grad_weight += (g.T @ h).to(acc_dtype)
        if with_grad:
            ctx.save_for_backward(grad_hidden, grad_weight.to(weight.dtype))
        ctx.mark_non_differentiable(correct)
        return loss, correct

    @staticmethod
    def backward(ctx, grad_loss, _grad_correct):
        grad_hidden, grad_weight = ctx.saved_tensors
        scale = grad_loss.to(grad_hidden.dtype)
        return grad_hidden * scale, grad_weight * scale, None, None, None, None, None


def linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, chunk_size: int = 2048,
                         ignore_index: int = IGNORE_INDEX, with_correct: bool = False
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """hidden [N, d], weight [V, d], labels [N] -> (sum of CE over tokens whose label is not ignore_index,
    in float32 (float64 for float64 inputs); with ``with_correct`` the number of those tokens whose argmax
    logit is the label, else 0).

    Under autocast the matmuls run in the autocast dtype, as ``F.linear`` would; otherwise in the
    weights' dtype. The log-sum-exp and the loss are float32 either way.
    """
    if hidden.ndim != 2 or weight.ndim != 2 or labels.shape != hidden.shape[:1] or hidden.shape[1] != weight.shape[1]:
        raise ValueError(f"linear_cross_entropy needs hidden [N, d], weight [V, d], labels [N]; got "
                         f"{tuple(hidden.shape)}, {tuple(weight.shape)}, {tuple(labels.shape)}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    device_type = hidden.device.type
    if torch.is_autocast_enabled(device_type):
        dtype = torch.get_autocast_dtype(device_type)
        hidden, weight = hidden.to(dtype), weight.to(dtype)
    elif hidden.dtype != weight.dtype:
        hidden = hidden.to(weight.dtype)
    with_grad = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)
    with torch.autocast(device_type, enabled=False):
        return LinearCrossEntropy.apply(hidden, weight, labels, chunk_size, ignore_index, with_grad, with_correct)
