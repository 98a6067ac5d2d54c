"""BLINK's input formats, as token-id lists.

Bi-encoder context (``max_context_length`` = 32 in the released models)::

    [CLS] left [unused0] mention [unused1] right [SEP] [PAD]...

The mention keeps at most ``max_len - 4`` word pieces; the rest of the budget
goes half to each side, and a side that needs less gives its spare to the
other (BLINK's ``get_context_representation``; an empty mention gets no
markers, as in BLINK). Where BLINK fails (a mention of 27+ pieces: its quota
of zero keeps ``tokens[-0:]``, all of the left context, and its length
assertion fails), a quota of zero here keeps *no* context.

Candidate (``max_cand_length`` = 128)::

    [CLS] title [unused2] description [SEP] [PAD]...

Cross-encoder pair: the padded context ids followed by the candidate ids
without their [CLS], cut to ``max_seq_length`` (BLINK's ``modify``); the
padding between the two parts is masked out and positions stay absolute,
segment ids are 1 on the non-pad candidate part (``to_bert_input``).

Tokenization follows BLINK's ``BertTokenizer`` (pytorch-transformers 1.2.0):

* mention fields are lower-cased with ``str.lower()`` before anything else
  (``main_dense`` does it), so a literal ``[SEP]`` in a mention's context is
  text (``[ sep ]``);
* entity titles and descriptions are not lower-cased first, and the tokenizer
  keeps the literal special tokens ``[UNK] [SEP] [PAD] [CLS] [MASK]`` (and, for
  the cross-encoder, which registers them, ``[unused0..2]``) as single ids.

Everything here is pure except :class:`BlinkInputs`, which holds a BERT
WordPiece tokenizer and applies the formats to text.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedTokenizerFast

ENT_START_TAG = "[unused0]"
ENT_END_TAG = "[unused1]"
ENT_TITLE_TAG = "[unused2]"
# The special tokens pytorch-transformers' BertTokenizer never splits (its ``all_special_tokens``).
BERT_SPECIAL_TOKENS = ("[UNK]", "[SEP]", "[PAD]", "[CLS]", "[MASK]")
# BLINK's CrossEncoderRanker also registers its three markers as special tokens.
CROSS_ENCODER_SPECIAL_TOKENS = (*BERT_SPECIAL_TOKENS, ENT_START_TAG, ENT_END_TAG, ENT_TITLE_TAG)

# Characters of raw text kept on each side of a mention before WordPiece: a
# piece covers at least one non-space character, so 16 characters per token of
# budget leaves every piece BLINK could keep (and bounds the work on long texts).
CHARS_PER_CONTEXT_TOKEN = 16


@dataclass(frozen=True, slots=True)
class SpecialIds:
    """Ids of the tokens BLINK's formats insert (from the model's vocabulary)."""

    cls: int
    sep: int
    pad: int
    ent_start: int
    ent_end: int
    title: int


@dataclass(frozen=True, slots=True)
class ContextText:
    """A mention with its left and right context, as text."""

    left: str
    mention: str
    right: str


def pad_to(ids: list[int], length: int, pad: int) -> list[int]:
    return ids + [pad] * (length - len(ids))


def context_ids(
    left: Sequence[int], mention: Sequence[int], right: Sequence[int], max_len: int, special: SpecialIds
) -> list[int]:
    """``[CLS] left [unused0] mention [unused1] right [SEP]``, padded to ``max_len``."""
    if max_len < 6:
        raise ValueError(f"max context length {max_len} leaves no room for a mention")
    # BLINK puts no markers around an empty mention
    marked = [special.ent_start, *list(mention)[: max_len - 4], special.ent_end] if len(mention) else []
    left_quota = (max_len - len(marked)) // 2 - 1
    right_quota = max_len - len(marked) - left_quota - 2
    if len(left) <= left_quota:
        if len(right) > right_quota:
            right_quota += left_quota - len(left)
    elif len(right) <= right_quota:
        left_quota += right_quota - len(right)
    left_part = list(left[-left_quota:]) if left_quota > 0 else []
    right_part = list(right[:right_quota]) if right_quota > 0 else []
    ids = [special.cls, *left_part, *marked, *right_part, special.sep]
    return pad_to(ids, max_len, special.pad)


def candidate_ids(title: Sequence[int], description: Sequence[int], max_len: int, special: SpecialIds) -> list[int]:
    """``[CLS] title [unused2] description [SEP]``, padded to ``max_len``."""
    body = [*title, special.title, *description][: max_len - 2]
    return pad_to([special.cls, *body, special.sep], max_len, special.pad)


def cross_ids(context: Sequence[int], candidate: Sequence[int], max_seq_len: int) -> list[int]:
    """One cross-encoder input: the padded context, then the candidate without [CLS]."""
    return [*context, *candidate[1:]][:max_seq_len]


def to_bert_input(token_ids: "torch.Tensor", pad_id: int, segment_pos: int = 0):
    """(token_ids, token_type_ids, attention_mask) as BLINK builds them.

    Segment 1 marks the non-pad tokens from ``segment_pos`` on (the candidate
    half of a cross-encoder input); the mask hides every pad id, including the
    context padding in the middle of a cross-encoder input.
    """
    segments = token_ids.new_zeros(token_ids.shape)
    if segment_pos > 0:
        segments[:, segment_pos:] = (token_ids[:, segment_pos:] != pad_id).to(segments.dtype)
    return token_ids, segments, (token_ids != pad_id).long()


def context_window(text: str, start: int, end: int, max_chars: int) -> ContextText:
    """Split ``text`` around ``[start, end)``, keeping at most ``max_chars`` each side.

    The cut falls on whitespace so that no half word becomes word pieces.
    """
    left_from = max(0, start - max_chars)
    if left_from > 0 and not text[left_from - 1].isspace():  # inside a word: skip to the next one
        space = text.find(" ", left_from, start)
        left_from = space + 1 if space != -1 else left_from
    right_to = min(len(text), end + max_chars)
    if right_to < len(text) and not text[right_to].isspace():  # inside a word: back to the previous one
        space = text.rfind(" ", end, right_to)
        right_to = space if space != -1 else right_to
    return ContextText(text[left_from:start], text[start:end], text[end:right_to])


class BlinkInputs:
    """Applies BLINK's formats to text with a BERT WordPiece tokenizer.

    ``literal_specials``: special tokens kept as one id when they appear literally in entity
    text (BLINK's tokenizers: :data:`BERT_SPECIAL_TOKENS`, or :data:`CROSS_ENCODER_SPECIAL_TOKENS`
    for the cross-encoder). ``lowercase``: mention fields get ``str.lower()`` first, as in
    BLINK's ``main_dense`` (uncased models).
    """

    def __init__(self, tokenizer: "PreTrainedTokenizerFast", max_context_length: int = 32,
                 max_cand_length: int = 128, max_seq_length: int = 256,
                 literal_specials: Sequence[str] = BERT_SPECIAL_TOKENS, lowercase: bool = True) -> None:
        self.tokenizer = tokenizer
        self.max_context_length = max_context_length
        self.max_cand_length = max_cand_length
        self.max_seq_length = max_seq_length
        self.special = special_ids(tokenizer)
        self.lowercase = lowercase
        vocab = tokenizer.get_vocab()
        self.literal_specials = {tok: vocab[tok] for tok in literal_specials if tok in vocab}
        self._special_split = (re.compile("(" + "|".join(map(re.escape, self.literal_specials)) + ")")
                               if self.literal_specials else None)

    def word_pieces(self, texts: Sequence[str], keep_specials: bool = False) -> list[list[int]]:
        """Token ids of each text, without added special tokens. A literal "[CLS]" is text, unless
        ``keep_specials`` (entity text): then the tokens of ``literal_specials`` are one id each."""
        if not texts:
            return []
        if keep_specials and self._special_split is not None:
            return self._pieces_keeping_specials(texts)
        enc = self.tokenizer(list(texts), add_special_tokens=False, split_special_tokens=True,
                             truncation=False, verbose=False)
        return [list(ids) for ids in enc["input_ids"]]

    def _pieces_keeping_specials(self, texts: Sequence[str]) -> list[list[int]]:
        parts = [self._special_split.split(t) if any(s in t for s in self.literal_specials) else [t] for t in texts]
        plain = [p for ps in parts for p in ps if p not in self.literal_specials]
        pieces = iter(self.word_pieces(plain))
        out = []
        for ps in parts:
            ids: list[int] = []
            for p in ps:
                ids.extend([self.literal_specials[p]] if p in self.literal_specials else next(pieces))
            out.append(ids)
        return out

    def contexts(self, items: Sequence[ContextText]) -> list[list[int]]:
        fields = [t for c in items for t in (c.left, c.mention, c.right)]
        pieces = self.word_pieces([t.lower() for t in fields] if self.lowercase else fields)
        return [
            context_ids(pieces[3 * i], pieces[3 * i + 1], pieces[3 * i + 2], self.max_context_length, self.special)
            for i in range(len(items))
        ]

    def candidates(self, titles: Sequence[str], descriptions: Sequence[str]) -> list[list[int]]:
        # Only the head of a description can fit: cut long ones before WordPiece.
        limit = self.max_cand_length * CHARS_PER_CONTEXT_TOKEN
        pieces = self.word_pieces([t for pair in zip(titles, descriptions) for t in (pair[0], pair[1][:limit])],
                                  keep_specials=True)
        return [candidate_ids(pieces[2 * i], pieces[2 * i + 1], self.max_cand_length, self.special)
                for i in range(len(titles))]

    def context_of_span(self, text: str, start: int, end: int) -> ContextText:
        return context_window(text, start, end, self.max_context_length * CHARS_PER_CONTEXT_TOKEN)


def special_ids(tokenizer: "PreTrainedTokenizerFast") -> SpecialIds:
    """The ids of [CLS], [SEP], [PAD] and BLINK's three [unusedN] markers."""
    vocab = tokenizer.get_vocab()
    names = {"cls": "[CLS]", "sep": "[SEP]", "pad": "[PAD]",
             "ent_start": ENT_START_TAG, "ent_end": ENT_END_TAG, "title": ENT_TITLE_TAG}
    missing = [tok for tok in names.values() if tok not in vocab]
    if missing:
        raise ValueError(f"the BERT vocabulary lacks {missing}: BLINK's formats need them")
    return SpecialIds(**{field: vocab[tok] for field, tok in names.items()})
