"""BLINK's bi-encoder on Hugging Face's BertModel, loading BLINK's released weights.

Architecture (BLINK ``BiEncoderModule`` with ``add_linear: false``): two BERT
encoders, ``context_encoder`` and ``cand_encoder``; each returns the last
layer's hidden state at [CLS] (no pooler, no extra linear layer); the score of
a mention and an entity is the dot product of the two vectors.

Checkpoint layout (``biencoder_wiki_large.bin``, a plain ``torch.save`` of a
state dict)::

    context_encoder.bert_model.embeddings.word_embeddings.weight
    context_encoder.bert_model.encoder.layer.0.attention.self.query.weight
    ...
    cand_encoder.bert_model.pooler.dense.bias

The BERT sub-keys are those of ``transformers.BertModel``; older BERT
checkpoints name LayerNorm parameters ``gamma``/``beta`` and DataParallel
prefixes ``module.``: :func:`normalise_state_dict` maps both. The BERT shape
(layers, width, vocabulary, positions) is read from the tensors, so no BERT
config file is needed; the head count is ``hidden_size // 64`` (BERT's rule)
unless the params file says otherwise. Models trained here are saved in the
same layout with the same file names, so one loader serves both.

Model folder (``--model DIR``)::

    biencoder_wiki_large.bin  + biencoder_wiki_large.json   (or biencoder.bin + biencoder.json)
    crossencoder_wiki_large.bin + crossencoder_wiki_large.json   (optional re-ranker)
    vocab.txt                  bert-large-uncased's vocabulary for BLINK's release
"""
from __future__ import annotations

import dataclasses
import glob
import json
import logging
import os
import re
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch
from torch import nn

from linker.inputs import BlinkInputs, to_bert_input
from linker.wordpiece import VOCAB_FILE, load_wordpiece
from wikiedm.fields import option

log = logging.getLogger(__name__)

BERT_HEAD_WIDTH = 64  # every released BERT has 64-dim attention heads
_IGNORED_KEYS = re.compile(r"(^|\.)embeddings\.(position_ids|token_type_ids)$")


@dataclass
class BlinkParams:
    """The part of BLINK's ``*_wiki_large.json`` the models need (other keys are kept, unused)."""

    bert_model: str = option("bert-large-uncased", "BERT the model was trained from (informative)")
    lowercase: bool = option(True, "lower-case and strip accents before WordPiece (uncased BERT)")
    max_context_length: int = option(32, "word pieces of a mention context, [CLS] and [SEP] included")
    max_cand_length: int = option(128, "word pieces of a candidate (title + description)")
    max_seq_length: int = option(256, "cross-encoder input length (context + candidate)")
    add_linear: bool = option(False, "a linear layer over the pooler output (cross-encoder: true)")
    out_dim: int = option(1, "output width of the additional linear layer")
    pull_from_layer: int = option(-1, "BERT layer whose [CLS] is used (BLINK: -1, the last)")
    num_attention_heads: int = option(0, "0: hidden_size // 64, as in every released BERT")
    extra: dict = option({}, "the file's other keys, written back unchanged")

    @classmethod
    def from_dict(cls, values: dict) -> "BlinkParams":
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        known = {k: v for k, v in values.items() if k in names and v is not None}
        return cls(**known, extra={k: v for k, v in values.items() if k not in names})

    @classmethod
    def from_json(cls, path: str) -> "BlinkParams":
        with open(path, encoding="utf-8") as fh:
            return cls.from_dict(json.load(fh))

    def to_dict(self) -> dict:
        values = dataclasses.asdict(self)
        return {**values.pop("extra"), **values}


class BertEncoder(nn.Module):
    """BLINK's ``BertEncoder``: [CLS] of the last layer, or linear(dropout(pooler)) with ``add_linear``."""

    def __init__(self, bert_model, add_linear: bool = False, out_dim: int = 1) -> None:
        super().__init__()
        self.bert_model = bert_model
        width = bert_model.config.hidden_size
        self.additional_linear = nn.Linear(width, out_dim) if add_linear else None
        self.dropout = nn.Dropout(0.1) if add_linear else None

    def forward(self, token_ids: torch.Tensor, segment_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        # Keywords: BLINK's positional (ids, segments, mask) order is not BertModel's.
        out = self.bert_model(input_ids=token_ids, token_type_ids=segment_ids, attention_mask=attention_mask)
        if self.additional_linear is None:
            return out.last_hidden_state[:, 0, :]
        return self.additional_linear(self.dropout(out.pooler_output))


class BiEncoder(nn.Module):
    """Two BertEncoders; ``forward`` returns the [contexts x candidates] dot-product scores."""

    def __init__(self, context_bert, cand_bert, pad_id: int = 0) -> None:
        super().__init__()
        self.context_encoder = BertEncoder(context_bert)
        self.cand_encoder = BertEncoder(cand_bert)
        self.pad_id = pad_id
        if context_bert.config.hidden_size != cand_bert.config.hidden_size:
            raise ValueError("context and candidate encoders must have the same width for dot-product scores")

    @property
    def dim(self) -> int:
        return self.cand_encoder.bert_model.config.hidden_size

    def encode_context(self, ids: torch.Tensor) -> torch.Tensor:
        return self.context_encoder(*to_bert_input(ids, self.pad_id))

    def encode_candidate(self, ids: torch.Tensor) -> torch.Tensor:
        return self.cand_encoder(*to_bert_input(ids, self.pad_id))

    def forward(self, context_ids: torch.Tensor, cand_ids: torch.Tensor) -> torch.Tensor:
        return self.encode_context(context_ids) @ self.encode_candidate(cand_ids).T


# --------------------------------------------------------------------------- state dicts


def normalise_state_dict(state_dict: dict) -> dict:
    """Old BERT names -> BertModel's: ``module.`` dropped, LayerNorm ``gamma/beta`` -> ``weight/bias``,
    non-persistent buffers (``embeddings.position_ids``) dropped."""
    out = {}
    for key, value in state_dict.items():
        key = key[len("module."):] if key.startswith("module.") else key
        key = re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", key)
        key = re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", key)
        if _IGNORED_KEYS.search(key):
            continue
        out[key] = value
    return out


def sub_state_dict(state_dict: dict, prefix: str) -> dict:
    """The entries under ``prefix.``, with the prefix removed."""
    cut = len(prefix) + 1
    return {k[cut:]: v for k, v in state_dict.items() if k.startswith(prefix + ".")}


def bert_config_from_state_dict(bert_state: dict, num_attention_heads: int = 0):
    """A BertConfig whose shapes are those of the tensors in ``bert_state`` (BertModel sub-keys)."""
    from transformers import BertConfig

    try:
        vocab_size, hidden = bert_state["embeddings.word_embeddings.weight"].shape
        max_positions = bert_state["embeddings.position_embeddings.weight"].shape[0]
        type_vocab = bert_state["embeddings.token_type_embeddings.weight"].shape[0]
        intermediate = bert_state["encoder.layer.0.intermediate.dense.weight"].shape[0]
    except KeyError as err:
        raise ValueError(f"not a BERT state dict: no {err.args[0]}") from None
    layers = 1 + max(int(m.group(1)) for k in bert_state if (m := re.match(r"encoder\.layer\.(\d+)\.", k)))
    heads = num_attention_heads or max(1, hidden // BERT_HEAD_WIDTH)
    if hidden % heads:
        raise ValueError(f"hidden size {hidden} is not a multiple of {heads} attention heads")
    return BertConfig(vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers,
                      num_attention_heads=heads, intermediate_size=intermediate,
                      max_position_embeddings=max_positions, type_vocab_size=type_vocab)


def bert_from_state_dict(bert_state: dict, num_attention_heads: int = 0):
    """A BertModel with exactly the weights of ``bert_state`` (missing or extra keys raise)."""
    from transformers import BertModel

    config = bert_config_from_state_dict(bert_state, num_attention_heads)
    model = BertModel(config, add_pooling_layer="pooler.dense.weight" in bert_state)
    load_exact(model, bert_state, what="BERT")
    return model


def load_exact(module: nn.Module, state: dict, what: str) -> None:
    result = module.load_state_dict(state, strict=False)
    problems = [f"missing {k}" for k in result.missing_keys] + [f"unexpected {k}" for k in result.unexpected_keys]
    if problems:
        shown = ", ".join(problems[:6]) + (f" (+{len(problems) - 6} more)" if len(problems) > 6 else "")
        raise ValueError(f"{what} weights do not fit the model: {shown}")


def read_state_dict(path: str) -> dict:
    """A ``torch.save``-d state dict, tensors only (``weights_only``: no code runs on load)."""
    state = torch.load(path, map_location="cpu", weights_only=True)
    if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]  # a training checkpoint wrapping the weights
    if not isinstance(state, dict):
        raise ValueError(f"{path}: expected a state dict, got {type(state).__name__}")
    return normalise_state_dict(state)


# --------------------------------------------------------------------------- model folders


def find_model_file(model_dir: str, kind: str) -> str | None:
    """``{kind}_wiki_large.bin`` (BLINK's name), ``{kind}.bin``, or the only ``{kind}*.bin``."""
    for name in (f"{kind}_wiki_large.bin", f"{kind}.bin"):
        path = os.path.join(model_dir, name)
        if os.path.isfile(path):
            return path
    found = sorted(glob.glob(os.path.join(glob.escape(model_dir), f"{kind}*.bin")))
    if len(found) > 1:
        raise ValueError(f"several {kind} weight files in {model_dir}: {[os.path.basename(f) for f in found]}")
    return found[0] if found else None


def read_params(weights_path: str) -> BlinkParams:
    """The ``.json`` beside a ``.bin`` (BLINK's parameters), or the released models' defaults."""
    path = os.path.splitext(weights_path)[0] + ".json"
    if os.path.isfile(path):
        return BlinkParams.from_json(path)
    log.warning("no %s: using BLINK's released defaults", path)
    return BlinkParams()


def resolve_vocab(model_dir: str, vocab: str | None) -> str:
    path = vocab or os.path.join(model_dir, VOCAB_FILE)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"no WordPiece vocabulary at {path}: put bert-large-uncased's vocab.txt in the model folder "
            "or pass its path (--vocab)")
    return path


@dataclass
class LoadedBiEncoder:
    model: BiEncoder
    params: BlinkParams
    inputs: BlinkInputs
    weights_path: str
    vocab_path: str


def load_biencoder(model_dir: str, vocab: str | None = None) -> LoadedBiEncoder:
    """Load a bi-encoder folder (BLINK's release or one trained here), in eval mode."""
    weights = find_model_file(model_dir, "biencoder")
    if weights is None:
        raise FileNotFoundError(f"no biencoder*.bin in {model_dir}")
    params = read_params(weights)
    state = read_state_dict(weights)
    context_state = sub_state_dict(state, "context_encoder.bert_model")
    cand_state = sub_state_dict(state, "cand_encoder.bert_model")
    if not context_state or not cand_state:
        raise ValueError(f"{weights}: expected keys context_encoder.bert_model.* and cand_encoder.bert_model.*")
    vocab_path = resolve_vocab(model_dir, vocab)
    tokenizer = load_wordpiece(vocab_path, params.lowercase)
    inputs = BlinkInputs(tokenizer, params.max_context_length, params.max_cand_length, params.max_seq_length,
                         lowercase=params.lowercase)
    model = BiEncoder(bert_from_state_dict(context_state, params.num_attention_heads),
                      bert_from_state_dict(cand_state, params.num_attention_heads), pad_id=inputs.special.pad)
    leftover = sorted(k for k in state if not k.startswith(("context_encoder.bert_model.", "cand_encoder.bert_model.")))
    if leftover:
        raise ValueError(f"{weights}: keys outside the two BERT encoders: {leftover[:6]}")
    check_vocab_fits(len(tokenizer), model.context_encoder.bert_model.config.vocab_size, vocab_path)
    model.eval()
    return LoadedBiEncoder(model, params, inputs, weights, vocab_path)


def check_vocab_fits(tokenizer_size: int, embedding_rows: int, vocab_path: str) -> None:
    if tokenizer_size > embedding_rows:
        raise ValueError(f"{vocab_path} has {tokenizer_size} tokens but the model embeds {embedding_rows}: wrong vocab.txt")


def save_model_folder(state_dict: dict, params: BlinkParams, out_dir: str, kind: str, vocab_path: str) -> str:
    """Write ``{kind}.bin`` (BLINK's layout), ``{kind}.json`` and ``vocab.txt`` into ``out_dir``."""
    import shutil

    os.makedirs(out_dir, exist_ok=True)
    weights = os.path.join(out_dir, f"{kind}.bin")
    tmp = weights + ".tmp"
    torch.save({k: v.detach().cpu().contiguous() for k, v in state_dict.items()}, tmp)
    os.replace(tmp, weights)
    with open(os.path.join(out_dir, f"{kind}.json"), "w", encoding="utf-8") as fh:
        json.dump(params.to_dict(), fh, indent=2, sort_keys=True)
    target = os.path.join(out_dir, VOCAB_FILE)
    if os.path.abspath(vocab_path) != os.path.abspath(target):
        shutil.copyfile(vocab_path, target)
    return weights


def model_device(module: nn.Module) -> torch.device:
    return next(module.parameters()).device


def resolve_device(name: str) -> torch.device:
    """'auto': CUDA when available, else CPU; otherwise a torch device name."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def new_biencoder(bert_config, pad_id: int = 0) -> BiEncoder:
    """A randomly initialised bi-encoder (training from scratch, tests, benchmarks)."""
    from transformers import BertModel

    return BiEncoder(BertModel(bert_config), BertModel(bert_config), pad_id=pad_id)


# --------------------------------------------------------------------------- batched encoding


def trim_padding(ids: torch.Tensor, pad_id: int, keep: int = 1) -> torch.Tensor:
    """Drop trailing columns that are padding in every row (outputs unchanged: pads are masked)."""
    nonpad = (ids != pad_id).any(dim=0).nonzero()
    width = int(nonpad.max()) + 1 if len(nonpad) else keep
    return ids[:, : max(width, keep)]


@torch.inference_mode()
def encode_in_batches(encode: Callable[[torch.Tensor], torch.Tensor], ids: Sequence[Sequence[int]],
                      batch_size: int, pad_id: int, device: str | torch.device | None = None) -> np.ndarray:
    """Encode id lists in batches (longest first, to trim padding well); float32 [n, dim] in input order."""
    if not len(ids):
        return np.zeros((0, 0), dtype=np.float32)
    order = sorted(range(len(ids)), key=lambda i: -sum(1 for t in ids[i] if t != pad_id))
    out: list[np.ndarray] = [None] * len(ids)  # type: ignore[list-item]
    for lo in range(0, len(order), batch_size):
        chunk = order[lo: lo + batch_size]
        batch = trim_padding(torch.tensor([list(ids[i]) for i in chunk], dtype=torch.long), pad_id)
        if device is not None:
            batch = batch.to(device)
        vectors = encode(batch).float().cpu().numpy()
        for row, i in enumerate(chunk):
            out[i] = vectors[row]
    return np.stack(out).astype(np.float32, copy=False)
