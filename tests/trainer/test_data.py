"""Corpus checks, sequences with entity markers, masking rates, and the global sample order."""
import json
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from schemas import PASSAGE_SCHEMA
from trainer.data import (
    Collator,
    CorpusError,
    GlobalSampleOrder,
    Passages,
    ReferenceCollator,
    TrainBatches,
    build_example,
    mask_example,
    masking_rngs,
    open_corpus,
    validation_batches,
)


def test_fixture_follows_the_contract(corpus_dir, tokenizer_and_ids):
    tok, ids = tokenizer_and_ids
    corpus = open_corpus(corpus_dir)
    assert corpus.train_shards and corpus.validation_shards
    for shard in corpus.train_shards + corpus.validation_shards:
        assert pq.read_schema(shard).equals(PASSAGE_SCHEMA, check_metadata=False)
    row = pq.ParquetFile(corpus.train_shards[0]).read_row_group(0).to_pylist()[0]
    assert len(row["token_ids"]) <= 128
    m = row["mentions"][0]
    assert tok.decode(row["token_ids"][m["token_start"]:m["token_end"]]).strip() == m["surface"]
    assert len({ids.pad, ids.bos, ids.eos, ids.mask, ids.entity_start, ids.entity_end}) == 6


def test_refuses_a_corpus_without_manifest(corpus_dir, tmp_path):
    copy = tmp_path / "partial"
    shutil.copytree(corpus_dir, copy)
    (copy / "manifest.json").unlink()
    with pytest.raises(CorpusError, match="no manifest.json"):
        open_corpus(copy)


def test_refuses_a_shard_whose_sha256_differs(corpus_dir, tmp_path):
    copy = tmp_path / "corrupt"
    shutil.copytree(corpus_dir, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    entry = next(e for e in manifest["files"] if e["path"].startswith("passages/train"))
    entry["sha256"] = "0" * 64
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CorpusError, match=entry["path"].split("/")[-1]):
        open_corpus(copy)


def test_markers_surround_mentions_and_carry_the_entity(tokenizer_and_ids):
    _, ids = tokenizer_and_ids
    tokens = [10, 11, 12, 13, 14]
    mentions = [{"token_start": 1, "token_end": 3, "entity_id": 7}, {"token_start": 4, "token_end": 5, "entity_id": 1}]
    ex = build_example(tokens, mentions, ids, max_seq_len=64)
    es, ee = ids.entity_start, ids.entity_end
    assert ex.tokens == [ids.bos, 10, es, 11, 12, ee, 13, es, 14, ee, ids.eos]
    assert ex.entity_ids == [0, 0, 7, 0, 0, 0, 0, 1, 0, 0, 0]
    assert ex.dropped_mentions == 0


def test_too_long_passages_drop_last_mentions_first_then_tokens(tokenizer_and_ids):
    _, ids = tokenizer_and_ids
    tokens = list(range(100, 110))
    mentions = [{"token_start": i, "token_end": i + 1, "entity_id": 5} for i in range(0, 10, 2)]
    ex = build_example(tokens, mentions, ids, max_seq_len=2 + 10 + 4)  # room for 2 mentions' markers
    assert len(ex.tokens) <= 16 and ex.dropped_mentions == 3 and ex.truncated_tokens == 0
    assert ex.tokens.count(ids.entity_start) == 2
    # Too long alone: the text is cut, and the leading mentions whose markers fit keep them.
    ex = build_example(tokens, mentions, ids, max_seq_len=2 + 6)
    assert ex.truncated_tokens == 6 and ex.tokens.count(ids.entity_start) == 1 and ex.dropped_mentions == 4
    assert ex.tokens == [ids.bos, ids.entity_start, 100, ids.entity_end, 101, 102, 103, ids.eos]
    # A 128-token window read at 64 tokens keeps the mentions of its first 64 - 2 - 2k tokens.
    window = list(range(1000, 1128))
    mentions = [{"token_start": i, "token_end": i + 3, "entity_id": 5} for i in range(5, 128, 10)]
    ex = build_example(window, mentions, ids, max_seq_len=64)
    assert len(ex.tokens) == 64 and ex.tokens.count(ids.entity_start) == 5 and ex.dropped_mentions == 8


def test_masking_rates_and_special_tokens(tokenizer_and_ids):
    _, ids = tokenizer_and_ids
    rng = np.random.default_rng(0)
    tokens = list(range(1000, 1100))
    mentions = [{"token_start": i, "token_end": i + 3, "entity_id": 9} for i in range(0, 100, 10)]
    ex = build_example(tokens, mentions, ids, max_seq_len=200)
    inside = {p for _, s, e in ex.mention_spans for p in range(s, e)}
    outside_masked = outside = spans_chosen = 0
    for _ in range(400):
        masked, ssm = mask_example(ex, rng, ids, p_rtm=0.3, p_ssm=0.5)
        for pos, (orig, new) in enumerate(zip(ex.tokens, masked)):
            if orig in ids.special:
                assert new == orig  # never a special token
            elif pos not in inside:
                outside += 1
                outside_masked += new == ids.mask
        for es_pos, s, e in ex.mention_spans:
            if es_pos in ssm:
                spans_chosen += 1
                assert all(masked[p] == ids.mask for p in range(s, e))  # whole mention
    assert abs(outside_masked / outside - 0.3) < 0.02
    assert abs(spans_chosen / (400 * len(ex.mention_spans)) - 0.5) < 0.03


def test_decoder_reconstructs_the_original_sequence(corpus_dir, tokenizer_and_ids):
    _, ids = tokenizer_and_ids
    corpus = open_corpus(corpus_dir)
    order = GlobalSampleOrder(corpus.train_shards, seed=3, window_row_groups=2)
    batch = next(TrainBatches(order, Collator(ids, 160, 0.3, 0.5, 3), 8, 4, 0, 1))[0]
    labels, dec = batch["labels"], batch["decoder_input_ids"]
    assert (dec[:, 0] == ids.eos).all()
    real = labels[:, :-1].ne(-100)
    assert (dec[:, 1:][real] == labels[:, :-1][real]).all()
    assert batch["input_ids"].eq(ids.mask).any()
    # The decoder reads the memory at its [Es] inputs with the entity of that mention.
    es = dec.eq(ids.entity_start)
    assert (batch["decoder_entity_ids"][es] == batch["entity_ids"][batch["input_ids"].eq(ids.entity_start)]).all()


def _sequence(order, collator, world, steps, start=0, global_batch=8, micro=2):
    ranks = [TrainBatches(order, collator, global_batch, micro, r, world, start) for r in range(world)]
    out = []
    for _ in range(steps):
        step = []
        for it in ranks:
            for mb in next(it):
                step += list(zip(mb["sample_indices"], mb["passage_ids"], mb["input_ids"].sum(1).tolist()))
        out.append(step)
    return out


def test_sample_order_is_independent_of_world_size_and_resumable(corpus_dir, tokenizer_and_ids):
    _, ids = tokenizer_and_ids
    corpus = open_corpus(corpus_dir)
    order = GlobalSampleOrder(corpus.train_shards, seed=11, window_row_groups=2)
    collator = Collator(ids, 160, 0.3, 0.5, 11)
    steps = order.epoch_size // 8 + 6  # cross an epoch boundary
    one = _sequence(order, collator, 1, steps)
    two = _sequence(order, collator, 2, steps)
    assert one == two  # same passages, same masks, same global batches
    resumed = _sequence(order, collator, 2, 6, start=(steps - 6) * 8)
    assert resumed == one[-6:]
    first_epoch = [pid for step in one for _, pid, _ in step][:order.epoch_size]
    assert len(set(first_epoch)) == order.epoch_size  # each passage once per epoch
    # Ranks read disjoint rows.
    r0 = next(TrainBatches(order, collator, 8, 2, 0, 2))
    r1 = next(TrainBatches(order, collator, 8, 2, 1, 2))
    assert not set(sum((b["passage_ids"] for b in r0), [])) & set(sum((b["passage_ids"] for b in r1), []))
    # Another seed, another order.
    other = GlobalSampleOrder(corpus.train_shards, seed=12, window_row_groups=2)
    assert _sequence(other, collator, 1, 2) != one[:2]


def test_validation_batches_are_fixed_and_equal_in_number_on_all_ranks(corpus_dir, tokenizer_and_ids):
    _, ids = tokenizer_and_ids
    corpus = open_corpus(corpus_dir)
    collator = Collator(ids, 160, 0.3, 0.5, 0)
    a = validation_batches(corpus.validation_shards, collator, 4, 0, 3, 0)
    b = validation_batches(corpus.validation_shards, collator, 4, 2, 3, 0)
    assert len(a) == len(b) > 0
    again = validation_batches(corpus.validation_shards, collator, 4, 0, 3, 0)
    assert all((x["input_ids"] == y["input_ids"]).all() for x, y in zip(a, again))


def test_prefetcher_yields_exactly_the_plain_sequence(corpus_dir, tokenizer_and_ids):
    from trainer.data import Prefetcher

    _, ids = tokenizer_and_ids
    corpus = open_corpus(corpus_dir)
    order = GlobalSampleOrder(corpus.train_shards, seed=5, window_row_groups=2)
    collator = Collator(ids, 160, 0.3, 0.5, 5)
    plain = TrainBatches(order, collator, 8, 4, 0, 1)
    fetched = Prefetcher(TrainBatches(order, collator, 8, 4, 0, 1), depth=2)
    for _ in range(5):
        a, b = next(plain), next(fetched)
        assert [x["passage_ids"] for x in a] == [x["passage_ids"] for x in b]
        assert all(torch.equal(x["input_ids"], y["input_ids"]) for x, y in zip(a, b))
    fetched.close()


def test_prefetcher_close_joins_its_thread_even_mid_iteration():
    """A run stopped early (train.stop_after_steps) closes the prefetcher while its thread is still making
    batches; close() returns only once the thread is gone, so the interpreter never tears it down mid-call."""
    import threading
    import time

    from trainer.data import Prefetcher

    producing = threading.Event()

    def endless():
        n = 0
        while True:
            producing.set()
            time.sleep(0.01)  # a batch being made
            yield n
            n += 1

    fetched = Prefetcher(endless(), depth=1)
    assert next(fetched) == 0 and producing.wait(5)
    fetched.close()
    assert not fetched._thread.is_alive()

    def failing():
        yield 1
        raise ValueError("a bad row group")

    broken = Prefetcher(failing(), depth=1)
    assert next(broken) == 1
    with pytest.raises(ValueError, match="a bad row group"):
        next(broken)
    broken.close()
    assert not broken._thread.is_alive()


def _assert_same_batch(fast: dict, reference: dict) -> None:
    assert fast.keys() == reference.keys()
    for key, value in reference.items():
        if isinstance(value, torch.Tensor):
            assert fast[key].dtype == value.dtype and torch.equal(fast[key], value), key
        else:
            assert fast[key] == value, key


@pytest.mark.parametrize("max_seq_len", [160, 40])  # 40: passages cut, mentions dropped
def test_collator_builds_exactly_the_reference_batches(corpus_dir, tokenizer_and_ids, max_seq_len):
    """The whole-batch numpy collation against the example-by-example definition, on the corpus's own rows, across
    an epoch's end (two windows and two epochs in one batch): the same tensors, bit for bit, for the same seed."""
    _, ids = tokenizer_and_ids
    corpus = open_corpus(corpus_dir)
    order = GlobalSampleOrder(corpus.train_shards, seed=21, window_row_groups=1)
    args = (ids, max_seq_len, 0.3, 0.5, 21, corpus.n_entities, "corpus")
    start = (order.epoch_size // 16 - 10) * 16
    fast = TrainBatches(order, Collator(*args), 16, 8, 0, 1, start_sample=start)
    reference = TrainBatches(order, ReferenceCollator(*args), 16, 8, 0, 1, start_sample=start)
    dropped = truncated = 0
    for _ in range(20):
        for a, b in zip(next(fast), next(reference)):
            _assert_same_batch(a, b)
            dropped, truncated = dropped + b["dropped_mentions"], truncated + b["truncated_tokens"]
    assert fast.samples_seen > order.epoch_size
    if max_seq_len == 40:
        assert dropped and truncated
    # Validation batches (their own masking stream) from rows as dicts.
    rows = pq.ParquetFile(corpus.validation_shards[0]).read_row_group(0).to_pylist()[:8]
    _assert_same_batch(Collator(*args)(rows, list(range(8)), masking_stream=1),
                       ReferenceCollator(*args)(rows, list(range(8)), masking_stream=1))
    assert Passages.from_rows(rows).to_rows() == [
        {"passage_id": r["passage_id"], "token_ids": r["token_ids"],
         "mentions": [{k: m[k] for k in ("token_start", "token_end", "entity_id")} for m in r["mentions"]]}
        for r in rows]


def test_collator_handles_overlapping_and_malformed_mentions_like_the_reference(tokenizer_and_ids):
    _, ids = tokenizer_and_ids
    rows = [{"passage_id": "a", "token_ids": list(range(100, 130)),
             "mentions": [{"token_start": s, "token_end": e, "entity_id": i}
                          for i, (s, e) in enumerate([(5, 9), (3, 6), (5, 7), (5, 9), (20, 19), (25, 31), (28, 30),
                                                      (0, 1), (1, 2), (29, 30)])]},
            {"passage_id": "b", "token_ids": [], "mentions": []},
            {"passage_id": "c", "token_ids": [7, 8], "mentions": [{"token_start": 0, "token_end": 2, "entity_id": 4}]}]
    for max_seq_len in (64, 20, 6):
        args = (ids, max_seq_len, 0.5, 0.5, 3)
        _assert_same_batch(Collator(*args)(rows, [0, 1, 2]), ReferenceCollator(*args)(rows, [0, 1, 2]))


def test_masking_rngs_are_the_per_sample_generators():
    for seed, stream, indices in ((1234, 0, [0, 1, 2**32 - 1]), (2**40, 1, [5]), (7, 1, [2**33, 3])):
        for rng, k in zip(masking_rngs(seed, stream, indices), indices):
            assert rng.random(4).tolist() == np.random.default_rng([seed, stream, k]).random(4).tolist()


def test_worker_processes_make_exactly_the_plain_sequence(corpus_dir, tokenizer_and_ids):
    """data.num_workers: steps made by 2 processes in turn, from a resume position, are the plain iterator's; an
    error in a worker (a batch linking an entity outside the table) is raised in the loop as it was raised there."""
    from trainer.data import WorkerBatches, prefetch

    _, ids = tokenizer_and_ids
    corpus = open_corpus(corpus_dir)
    order = GlobalSampleOrder(corpus.train_shards, seed=5, window_row_groups=2)
    collator = Collator(ids, 160, 0.3, 0.5, 5)
    plain = TrainBatches(order, collator, 8, 4, 0, 2, start_sample=16)
    made = prefetch(TrainBatches(order, collator, 8, 4, 0, 2, start_sample=16), num_workers=2)
    broken = WorkerBatches(TrainBatches(order, Collator(ids, 160, 0.3, 0.5, 5, n_entities=1, source="mixed"), 8, 4,
                                        0, 1), num_workers=1)  # started beside the others: one start-up to wait for
    assert isinstance(made, WorkerBatches)
    try:
        for _ in range(5):
            for a, b in zip(next(plain), next(made)):
                _assert_same_batch(b, a)
        with pytest.raises(CorpusError, match="mixed: passage .* links entity id"):
            next(broken)
    finally:
        made.close(), broken.close()
    assert not any(p.is_alive() for p in made._workers + broken._workers)
