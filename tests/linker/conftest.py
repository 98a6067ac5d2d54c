"""Fixtures of the linker tests: a WordPiece vocabulary built from the sample corpus,
a fake BLINK release (tiny BERTs saved under BLINK's file names and state-dict keys),
and its saved entity encodings for the sample corpus."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

TINY_BERT = dict(hidden_size=128, num_hidden_layers=2, intermediate_size=256, max_position_embeddings=512)
# BLINK's released JSON files hold more keys; these are the ones the models read.
BIENCODER_PARAMS = {"bert_model": "bert-large-uncased", "lowercase": True, "max_context_length": 32,
                    "max_cand_length": 128, "max_seq_length": 256, "add_linear": False, "out_dim": 1,
                    "pull_from_layer": -1, "data_parallel": False, "top_k": 10, "encode_batch_size": 8}
CROSSENCODER_PARAMS = {**BIENCODER_PARAMS, "add_linear": True, "max_seq_length": 160}


def tiny_bert(vocab_size: int, seed: int):
    from transformers import BertConfig, BertModel

    torch.manual_seed(seed)
    # 128 wide: BERT's rule (64-dim heads) gives the 2 heads the loader will infer.
    return BertModel(BertConfig(vocab_size=vocab_size, num_attention_heads=2, **TINY_BERT)).eval()


def blink_keys(prefix: str, bert, old_layernorm_names: bool = False) -> dict:
    """A BertModel's weights under BLINK's key names (optionally with gamma/beta, as old BERT code saved them)."""
    out = {}
    for key, value in bert.state_dict().items():
        if old_layernorm_names:
            key = key.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")
        out[f"{prefix}.{key}"] = value.clone()
    return out


def write_fake_release(folder: Path, vocab_file: Path, with_crossencoder: bool = True) -> Path:
    from linker.wordpiece import load_wordpiece

    folder.mkdir(parents=True, exist_ok=True)
    vocab_size = len(load_wordpiece(str(vocab_file)))
    (folder / "vocab.txt").write_bytes(vocab_file.read_bytes())
    state = {**blink_keys("context_encoder.bert_model", tiny_bert(vocab_size, 1), old_layernorm_names=True),
             **blink_keys("cand_encoder.bert_model", tiny_bert(vocab_size, 2))}
    torch.save(state, folder / "biencoder_wiki_large.bin")
    (folder / "biencoder_wiki_large.json").write_text(json.dumps(BIENCODER_PARAMS))
    if with_crossencoder:
        torch.manual_seed(3)
        cross = {**blink_keys("encoder.bert_model", tiny_bert(vocab_size, 3)),
                 "encoder.additional_linear.weight": torch.randn(1, TINY_BERT["hidden_size"]) * 0.1,
                 "encoder.additional_linear.bias": torch.zeros(1)}
        torch.save(cross, folder / "crossencoder_wiki_large.bin")
        (folder / "crossencoder_wiki_large.json").write_text(json.dumps(CROSSENCODER_PARAMS))
    return folder


@pytest.fixture(scope="session")
def sample_vocab(tmp_path_factory, sample_corpus) -> Path:
    """A 1,000-id WordPiece vocabulary of the sample corpus, made once by ``build_vocab`` on its titles, descriptions
    and training contexts, and committed: the tokenizers trainer breaks ties by hash-map order, which changes from
    process to process (huggingface/tokenizers#1794), and the tiny models' accuracy after a few steps changed
    with it. ``test_the_committed_vocab_is_one_build_vocab_makes`` checks it is still such a vocabulary."""
    import shutil

    target = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    shutil.copyfile(Path(__file__).parent / "data" / "sample_vocab.txt", target)
    return target


@pytest.fixture(scope="session")
def fake_release(tmp_path_factory, sample_vocab) -> Path:
    """A BLINK-style model folder: biencoder_wiki_large.{bin,json}, crossencoder_wiki_large.{bin,json}, vocab.txt."""
    return write_fake_release(tmp_path_factory.mktemp("blink_release"), sample_vocab)


@pytest.fixture(scope="session")
def indexed_release(fake_release, sample_corpus) -> Path:
    """The fake release with its entity encodings for the sample corpus saved (linker.cli index)."""
    from linker.link import LinkerConfig, prepare_encodings

    prepare_encodings(LinkerConfig(model=str(fake_release), corpus=str(sample_corpus)))
    return fake_release
