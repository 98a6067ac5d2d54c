"""BLINK's input formats: context trimming around the mention, candidates, cross-encoder pairs."""
from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from linker.inputs import (
    ContextText,
    SpecialIds,
    candidate_ids,
    context_ids,
    context_window,
    cross_ids,
    to_bert_input,
)

S = SpecialIds(cls=101, sep=102, pad=0, ent_start=1, ent_end=2, title=3)
LEFT = list(range(1000, 1040))  # 40 pieces
RIGHT = list(range(2000, 2040))
MENTION = [500, 501, 502]


def test_context_is_cls_left_marked_mention_right_sep():
    ids = context_ids([10, 11], [500], [20], 32, S)
    assert ids[:7] == [101, 10, 11, 1, 500, 2, 20]
    assert ids[7] == 102 and ids[8:] == [0] * 24 and len(ids) == 32


def test_long_context_is_split_evenly_around_the_mention():
    ids = context_ids(LEFT, MENTION, RIGHT, 32, S)
    # 32 - 5 (marked mention) = 27; left quota 27 // 2 - 1 = 12, right 13; + [CLS] + [SEP].
    assert ids[0] == 101 and ids[-1] == 102
    assert ids[1:13] == LEFT[-12:]  # the pieces nearest the mention
    assert ids[13:18] == [1, *MENTION, 2]
    assert ids[18:31] == RIGHT[:13]


def test_a_short_side_gives_its_spare_budget_to_the_other():
    ids = context_ids(LEFT[:3], MENTION, RIGHT, 32, S)
    assert ids[1:4] == LEFT[:3] and ids[4:9] == [1, *MENTION, 2]
    assert ids[9:31] == RIGHT[:22] and ids[31] == 102
    ids = context_ids(LEFT, MENTION, RIGHT[:2], 32, S)
    assert ids[-5:] == [1, *MENTION, 2, *RIGHT[:2], 102][-5:]
    assert 0 not in ids  # the left side filled the whole budget


def test_a_mention_longer_than_the_budget_is_cut_and_keeps_no_context():
    ids = context_ids(LEFT, list(range(40)), RIGHT, 32, S)
    assert ids == [101, 1, *range(28), 2, 102]  # BLINK's [-0:] would have kept the whole left context


def test_candidate_is_cls_title_tag_description_sep_cut_to_length():
    ids = candidate_ids([7, 8], list(range(300, 500)), 16, S)
    assert ids == [101, 7, 8, 3, *range(300, 311), 102]
    assert candidate_ids([7], [9], 8, S) == [101, 7, 3, 9, 102, 0, 0, 0]


def test_cross_input_is_padded_context_then_candidate_without_cls():
    ctx = context_ids([10], [500], [20], 8, S)
    cand = candidate_ids([7], [9], 6, S)
    assert cross_ids(ctx, cand, 16) == ctx + cand[1:]  # 8 + 5: fits
    assert cross_ids(ctx, cand, 10) == (ctx + cand[1:])[:10]


def test_bert_input_segments_mark_the_candidate_and_mask_every_pad():
    ids = torch.tensor([[101, 5, 102, 0, 7, 102, 0]])
    tokens, segments, mask = to_bert_input(ids, pad_id=0, segment_pos=3)
    assert segments.tolist() == [[0, 0, 0, 0, 1, 1, 0]]
    assert mask.tolist() == [[1, 1, 1, 0, 1, 1, 0]]
    assert to_bert_input(ids, 0)[1].sum() == 0


@settings(max_examples=200, deadline=None)
@given(left=st.integers(0, 60), mention=st.integers(1, 40), right=st.integers(0, 60), max_len=st.integers(8, 64))
def test_context_always_fits_and_keeps_the_marked_mention(left, mention, right, max_len):
    ids = context_ids(LEFT[:0] + list(range(1000, 1000 + left)), list(range(500, 500 + mention)),
                      list(range(2000, 2000 + right)), max_len, S)
    assert len(ids) == max_len and ids[0] == 101 and ids.count(102) == 1
    start, end = ids.index(1), ids.index(2)
    assert ids[start + 1: end] == list(range(500, 500 + min(mention, max_len - 4)))
    kept_left, kept_right = ids[1:start], ids[end + 1: ids.index(102)]
    assert kept_left == list(range(1000, 1000 + left))[len(list(range(left))) - len(kept_left):]
    assert kept_right == list(range(2000, 2000 + len(kept_right)))
    free = max_len - 2 - (end - start + 1)
    assert len(kept_left) + len(kept_right) == min(free, left + right)  # no budget wasted


def test_context_window_cuts_long_text_on_whitespace():
    text = "alpha beta gamma delta MENTION epsilon zeta eta theta"
    start = text.index("MENTION")
    assert context_window(text, start, start + 7, max_chars=12) == ContextText("gamma delta ", "MENTION", " epsilon")
    # A cut inside a word moves to the word boundary, dropping the half word.
    assert context_window(text, start, start + 7, max_chars=10) == ContextText("delta ", "MENTION", " epsilon")
    full = context_window(text, 0, 5, max_chars=1000)
    assert (full.left, full.mention, full.right) == ("", "alpha", text[5:])
