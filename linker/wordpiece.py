"""BERT WordPiece tokenizers: load a ``vocab.txt``, or build a small one from text.

BLINK's released models use bert-large-uncased's vocabulary: give its
``vocab.txt`` (a local file; nothing is downloaded). Models trained from
scratch here (tests, small corpora) can use a vocabulary built from the
corpus with :func:`build_vocab`, laid out like BERT's: ``[PAD]`` is id 0,
then ``[unused0..2]`` (BLINK's markers), ``[UNK] [CLS] [SEP] [MASK]``.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

VOCAB_FILE = "vocab.txt"
RESERVED_TOKENS = ("[PAD]", "[unused0]", "[unused1]", "[unused2]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def load_wordpiece(vocab_file: str, lowercase: bool = True) -> "PreTrainedTokenizerFast":
    """A fast BERT tokenizer over ``vocab_file``: BERT's normaliser (uncased: lower-cased, accents
    stripped), pre-tokenizer and WordPiece, built from ``tokenizers`` parts (no hub files needed)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    if not os.path.isfile(vocab_file):
        raise FileNotFoundError(f"no WordPiece vocabulary at {vocab_file} (BLINK needs bert-large-uncased's vocab.txt)")
    backend = Tokenizer(models.WordPiece.from_file(vocab_file, unk_token="[UNK]", max_input_chars_per_word=100))
    backend.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                    strip_accents=lowercase, lowercase=lowercase)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.decoder = decoders.WordPiece(prefix="##")
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", sep_token="[SEP]", pad_token="[PAD]",
                                   cls_token="[CLS]", mask_token="[MASK]", model_max_length=512)


def build_vocab(texts: Iterable[str], out_file: str, vocab_size: int = 2000, lowercase: bool = True) -> str:
    """Train a WordPiece vocabulary on ``texts`` and write it as ``vocab.txt``; returns the path.

    The ``tokenizers`` trainer breaks ties between equally frequent merges by hash-map order, which changes from
    process to process (huggingface/tokenizers#1794): two runs on the same texts may differ in a few pieces."""
    from tokenizers import BertWordPieceTokenizer

    trainer = BertWordPieceTokenizer(lowercase=lowercase, strip_accents=lowercase)
    trainer.train_from_iterator(texts, vocab_size=vocab_size, min_frequency=1,
                                special_tokens=list(RESERVED_TOKENS), show_progress=False)
    vocab = trainer.get_vocab()
    ordered = sorted(vocab, key=vocab.__getitem__)
    if tuple(ordered[: len(RESERVED_TOKENS)]) != RESERVED_TOKENS:  # the trainer keeps them first, in order
        raise RuntimeError(f"unexpected reserved tokens {ordered[:len(RESERVED_TOKENS)]}")
    os.makedirs(os.path.dirname(os.path.abspath(out_file)), exist_ok=True)
    with open(out_file, "w", encoding="utf-8") as fh:
        fh.write("\n".join(ordered) + "\n")
    return out_file
