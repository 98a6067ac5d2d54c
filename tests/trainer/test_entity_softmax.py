"""The blocked entity softmax equals the dense one, in value and gradient, for any block size."""
import pytest
import torch

from trainer.entity_softmax import blocked_entity_softmax, dense_entity_softmax, topk_entity_read

N_ENTITIES, DIM, MENTIONS = 37, 6, 9


def _inputs(seed=0, dtype=torch.float64, mentions=MENTIONS):
    g = torch.Generator().manual_seed(seed)
    q = (torch.randn(mentions, DIM, generator=g, dtype=dtype) * 2).requires_grad_()
    table = torch.randn(N_ENTITIES, DIM, generator=g, dtype=dtype).requires_grad_()
    return q, table


def _value_and_grads(fn, q, table, seed=1):
    g = torch.Generator().manual_seed(seed)
    w_lse = torch.randn(q.shape[0], generator=g, dtype=q.dtype)
    w_read = torch.randn(q.shape[0], DIM, generator=g, dtype=q.dtype)
    targets = torch.randint(0, N_ENTITIES, (q.shape[0],), generator=g)
    lse, read, top1 = fn(q, table)
    # The EL loss (lse - target score) and a downstream use of the read, as in the model.
    loss = (w_lse * (lse - (q * table[targets]).sum(1))).sum() + (w_read * read).sum()
    grads = torch.autograd.grad(loss, (q, table))
    return lse, read, top1, grads


def _blocked_with_targets(block_size, with_read=True, seed=1):
    """The model's use: the target score comes out of the same autograd function."""
    def fn(q, table):
        g = torch.Generator().manual_seed(seed)
        torch.randn(q.shape[0], generator=g, dtype=q.dtype), torch.randn(q.shape[0], DIM, generator=g, dtype=q.dtype)
        targets = torch.randint(0, N_ENTITIES, (q.shape[0],), generator=g)
        lse, read, top1, target_score = blocked_entity_softmax(q, table, block_size, targets, with_read)
        return lse, read, top1, target_score
    return fn


@pytest.mark.parametrize("block_size", [3, 37, 50])
def test_target_score_inside_the_function_has_the_dense_gradient(block_size):
    q, table = _inputs()
    g = torch.Generator().manual_seed(1)
    w_lse = torch.randn(q.shape[0], generator=g, dtype=q.dtype)
    w_read = torch.randn(q.shape[0], DIM, generator=g, dtype=q.dtype)
    targets = torch.randint(0, N_ENTITIES, (q.shape[0],), generator=g)
    lse, read, _ = dense_entity_softmax(q, table)
    dense = torch.autograd.grad((w_lse * (lse - (q * table[targets]).sum(1))).sum() + (w_read * read).sum(), (q, table))
    lse, read, _, target_score = _blocked_with_targets(block_size)(q, table)
    blocked = torch.autograd.grad((w_lse * (lse - target_score)).sum() + (w_read * read).sum(), (q, table))
    for gb, gd in zip(blocked, dense):
        torch.testing.assert_close(gb, gd, rtol=0, atol=1e-11)
    # The linking head: no read at all, only the loss.
    lse_d, _, _ = dense_entity_softmax(q, table)
    dense = torch.autograd.grad((lse_d - (q * table[targets]).sum(1)).sum(), (q, table))
    lse, read, _, target_score = _blocked_with_targets(block_size, with_read=False)(q, table)
    assert read.shape == (q.shape[0], 0)
    blocked = torch.autograd.grad((lse - target_score).sum(), (q, table))
    for gb, gd in zip(blocked, dense):
        torch.testing.assert_close(gb, gd, rtol=0, atol=1e-11)


@pytest.mark.parametrize("block_size", [1, 5, 8, 36, 37, 64])  # 5, 8 and 36 do not divide 37
def test_blocked_matches_dense_in_value_and_gradient(block_size):
    q, table = _inputs()
    dense = _value_and_grads(dense_entity_softmax, q, table)
    blocked = _value_and_grads(lambda a, b: blocked_entity_softmax(a, b, block_size), q, table)
    torch.testing.assert_close(blocked[0], dense[0], rtol=0, atol=1e-12)
    torch.testing.assert_close(blocked[1], dense[1], rtol=0, atol=1e-12)
    assert torch.equal(blocked[2], dense[2])
    for gb, gd in zip(blocked[3], dense[3]):
        torch.testing.assert_close(gb, gd, rtol=0, atol=1e-11)


def test_gradcheck_float64():
    q, table = _inputs(mentions=3)
    table = table.detach()[:11].clone().requires_grad_()  # small: gradcheck is O(inputs) evaluations
    assert torch.autograd.gradcheck(lambda a, b: blocked_entity_softmax(a, b, 7)[:2], (q, table))
    targets = torch.tensor([4, 4, 9])
    assert torch.autograd.gradcheck(
        lambda a, b: [blocked_entity_softmax(a, b, 7, targets)[i] for i in (0, 1, 3)], (q, table))


def test_no_mentions_is_finite_and_gives_zero_gradients():
    q, table = _inputs(mentions=0)
    lse, read, top1 = blocked_entity_softmax(q, table, 8)
    assert lse.shape == (0,) and read.shape == (0, DIM)
    (lse.sum() + read.sum()).backward()
    assert torch.equal(table.grad, torch.zeros_like(table))


def test_float32_is_stable_with_large_scores():
    q, table = _inputs(dtype=torch.float32)
    with torch.no_grad():
        q.mul_(100.0)  # scores in the thousands: a naive exp overflows
    lse, read, _ = blocked_entity_softmax(q, table, 8)
    ref_lse, ref_read, _ = dense_entity_softmax(q.double(), table.double())
    assert torch.isfinite(lse).all() and torch.isfinite(read).all()
    torch.testing.assert_close(lse.double(), ref_lse, rtol=1e-5, atol=1e-3)


def test_bf16_table_is_computed_in_float32():
    q, table = _inputs(dtype=torch.float32)
    lse, read, _ = blocked_entity_softmax(q.bfloat16(), table.bfloat16(), 8)
    assert lse.dtype == torch.float32 and read.dtype == torch.float32


@pytest.mark.parametrize("block_size", [4, 10, 37])
def test_topk_read_aggregates_the_k_best_entities(block_size):
    q, table = _inputs()
    q, table = q.detach(), table.detach()
    k = 5
    read, ids, scores = topk_entity_read(q, table, k=k, block_size=block_size)
    dense_scores = q @ table.T
    ref_scores, ref_ids = dense_scores.topk(k, dim=1)
    torch.testing.assert_close(scores, ref_scores)
    ref_read = torch.einsum("mk,mkd->md", torch.softmax(ref_scores, 1), table[ref_ids])
    torch.testing.assert_close(read, ref_read)
    # With k = N it is the full softmax read.
    full, _, _ = topk_entity_read(q, table, k=N_ENTITIES, block_size=block_size)
    torch.testing.assert_close(full, dense_entity_softmax(q, table)[1])


@pytest.mark.parametrize("with_read", [True, False])
def test_gradient_added_straight_into_the_table_grad_equals_autograds(with_read):
    """accumulate_grad (the row-partitioned memory's path): the rows' gradient lands in table.grad, added to
    what is there, and equals the dense one; a second read adds again, as autograd accumulates."""
    q, table = _inputs()
    targets = torch.randint(0, N_ENTITIES, (q.shape[0],), generator=torch.Generator().manual_seed(2))
    w_read = torch.randn(q.shape[0], DIM, generator=torch.Generator().manual_seed(3), dtype=q.dtype)

    def loss_of(lse, read, score):
        return (lse - score).sum() + ((w_read * read).sum() if with_read else 0.0)

    lse, read, _ = dense_entity_softmax(q, table)
    dense_q, dense_t = torch.autograd.grad(loss_of(lse, read, (q * table[targets]).sum(1)), (q, table))
    before = torch.randn(table.shape, dtype=table.dtype, generator=torch.Generator().manual_seed(4))
    table.grad = before.clone()
    for reads in (1, 2):
        lse, read, _, score = blocked_entity_softmax(q, table, 8, targets, with_read, accumulate_grad=True)
        (grad_q,) = torch.autograd.grad(loss_of(lse, read, score), (q,))
        torch.testing.assert_close(grad_q, dense_q, rtol=0, atol=1e-11)
        torch.testing.assert_close(table.grad, before + reads * dense_t, rtol=0, atol=1e-11)
