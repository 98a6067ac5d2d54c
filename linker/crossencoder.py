"""BLINK's cross-encoder re-ranker, loading ``crossencoder_wiki_large.bin``.

One BERT reads the mention context and a candidate together (see
:func:`linker.inputs.cross_ids`); the score is ``additional_linear`` over the
dropout of BERT's pooler output (BLINK's ``BertEncoder`` with
``add_linear: true, out_dim: 1``). Keys: ``encoder.bert_model.*`` and
``encoder.additional_linear.{weight,bias}``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from torch import nn

from linker.biencoder import (
    BertEncoder,
    BlinkParams,
    bert_from_state_dict,
    check_vocab_fits,
    find_model_file,
    load_exact,
    read_params,
    read_state_dict,
    resolve_vocab,
    sub_state_dict,
    trim_padding,
)
from linker.inputs import CROSS_ENCODER_SPECIAL_TOKENS, BlinkInputs, cross_ids, to_bert_input
from linker.wordpiece import load_wordpiece


class CrossEncoder(nn.Module):
    """Scores (context, candidate) pairs; ``forward`` takes [pairs, seq] ids and returns [pairs] logits."""

    def __init__(self, bert, pad_id: int = 0, context_length: int = 32, out_dim: int = 1) -> None:
        super().__init__()
        self.encoder = BertEncoder(bert, add_linear=True, out_dim=out_dim)
        self.pad_id = pad_id
        self.context_length = context_length  # where segment 1 (the candidate) starts

    def forward(self, pair_ids: torch.Tensor) -> torch.Tensor:
        return self.encoder(*to_bert_input(pair_ids, self.pad_id, self.context_length)).squeeze(-1)

    def score(self, context: Sequence[int], candidates: Sequence[Sequence[int]], max_seq_length: int,
              batch_size: int = 16) -> np.ndarray:
        """Logits of one context against each candidate (BLINK's input: context ids + candidate ids[1:])."""
        return self.score_pairs([cross_ids(context, cand, max_seq_length) for cand in candidates], batch_size)

    @torch.inference_mode()
    def score_pairs(self, pairs: Sequence[Sequence[int]], batch_size: int = 16) -> np.ndarray:
        """Logits of ready-made cross-encoder inputs (see :func:`linker.inputs.cross_ids`), float32 [pairs]."""
        device = self.encoder.additional_linear.weight.device
        out = []
        for lo in range(0, len(pairs), batch_size):
            width = max(len(p) for p in pairs[lo: lo + batch_size])
            batch = torch.tensor([list(p) + [self.pad_id] * (width - len(p)) for p in pairs[lo: lo + batch_size]],
                                 dtype=torch.long, device=device)
            out.append(self(trim_padding(batch, self.pad_id, keep=self.context_length + 1)).float().cpu().numpy())
        return np.concatenate(out) if out else np.zeros(0, dtype=np.float32)


@dataclass
class LoadedCrossEncoder:
    model: CrossEncoder
    params: BlinkParams
    inputs: BlinkInputs
    weights_path: str


def load_crossencoder(model_dir: str, vocab: str | None = None) -> LoadedCrossEncoder | None:
    """The re-ranker of a model folder, or None when the folder has none."""
    weights = find_model_file(model_dir, "crossencoder")
    if weights is None:
        return None
    params = read_params(weights)
    state = read_state_dict(weights)
    bert_state = sub_state_dict(state, "encoder.bert_model")
    linear_state = sub_state_dict(state, "encoder.additional_linear")
    if not bert_state or set(linear_state) != {"weight", "bias"}:
        raise ValueError(f"{weights}: expected encoder.bert_model.* and encoder.additional_linear.{{weight,bias}}")
    leftover = sorted(k for k in state if not k.startswith(("encoder.bert_model.", "encoder.additional_linear.")))
    if leftover:
        raise ValueError(f"{weights}: unexpected keys {leftover[:6]}")
    vocab_path = resolve_vocab(model_dir, vocab)
    tokenizer = load_wordpiece(vocab_path, params.lowercase)
    inputs = BlinkInputs(tokenizer, params.max_context_length, params.max_cand_length, params.max_seq_length,
                         literal_specials=CROSS_ENCODER_SPECIAL_TOKENS, lowercase=params.lowercase)
    bert = bert_from_state_dict(bert_state, params.num_attention_heads)
    check_vocab_fits(len(tokenizer), bert.config.vocab_size, vocab_path)
    model = CrossEncoder(bert, pad_id=inputs.special.pad, context_length=params.max_context_length,
                         out_dim=linear_state["weight"].shape[0])
    load_exact(model.encoder.additional_linear, linear_state, what="cross-encoder linear layer")
    model.eval()
    return LoadedCrossEncoder(model, params, inputs, weights)

