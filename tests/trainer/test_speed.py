"""trainer.speed on CPU: compiled layers equal eager ones, padding to max_seq_len leaves the loss and its
gradients unchanged, the micro-batch choices, and the ``train.compile`` / ``micro_batch_size`` settings."""
from __future__ import annotations

import copy

import pytest
import torch

from trainer.config import Config, ModelConfig, validate
from trainer.model import EDMem, EDMemSpec
from trainer.speed import (
    compile_layers,
    cpu_micro_batch,
    micro_batch_candidates,
    pad_batch,
    probe_batch,
    resolve_micro_batch,
    use_compile,
)


class Ids:  # the TokenIds fields the probe batch uses
    pad, bos, eos, mask, entity_start, entity_end, vocab_size = 0, 1, 2, 3, 4, 5, 300
    special = (0, 1, 2, 3, 4, 5)


def _model(seed=0) -> EDMem:
    m = ModelConfig(d_model=32, attention_heads=2, ffn_dim=64, lower_layers=1, upper_layers=1, entity_dim=16,
                    max_positions=64, dropout=0.0, entity_block_size=64)
    torch.manual_seed(seed)
    return EDMem(EDMemSpec(m, Ids.vocab_size, 100, Ids.pad, Ids.entity_start, Ids.eos))


def _batch(b=4, s=32):
    batch = probe_batch(b, s, Ids, 100, 3, "cpu")
    batch["attention_mask"][0, 20:] = False  # a shorter first sequence, padded as the collator pads
    batch["input_ids"][0, 20:] = Ids.pad
    batch["labels"][0, 20:] = -100
    batch["decoder_input_ids"][0, 21:] = Ids.pad
    batch["entity_ids"][0, 20:] = 0
    batch["decoder_entity_ids"][0, 21:] = 0
    return batch


def _loss_and_grads(model, batch):
    model.zero_grad(set_to_none=True)
    out = model(**batch)
    out["loss"].backward()
    return out, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_compiled_layers_equal_eager():
    # aot_eager: dynamo's graph capture and AOTAutograd's joint graph without inductor's C++ build (minutes on
    # 2 cores); benchmarks/gpu_check.sh runs inductor through tests/trainer/test_gpu.py.
    eager = _model()
    compiled = copy.deepcopy(eager)
    assert compile_layers(compiled, backend="aot_eager") == 4
    assert list(compiled.state_dict()) == list(eager.state_dict())  # checkpoints keep their names
    batch = _batch()
    ref, ref_grads = _loss_and_grads(eager, batch)
    out, grads = _loss_and_grads(compiled, batch)
    torch.testing.assert_close(out["loss"], ref["loss"])
    assert grads.keys() == ref_grads.keys()
    for name in grads:
        torch.testing.assert_close(grads[name], ref_grads[name], rtol=1e-4, atol=1e-6, msg=name)


def test_padding_to_max_seq_len_changes_nothing():
    model = _model()
    batch = _batch()
    ref, ref_grads = _loss_and_grads(model, batch)
    padded = pad_batch(batch, 48, Ids.pad)
    assert padded["input_ids"].shape == (4, 48) and not padded["attention_mask"][:, 32:].any()
    assert (padded["labels"][:, 32:] == -100).all() and (padded["decoder_input_ids"][:, 32:] == Ids.pad).all()
    out, grads = _loss_and_grads(model, padded)
    for key in ("loss", "lm_sum", "lm_tokens", "el_enc_sum", "el_head_count"):
        torch.testing.assert_close(out[key], ref[key], rtol=1e-5, atol=1e-6, msg=key)
    for name in grads:
        torch.testing.assert_close(grads[name], ref_grads[name], rtol=1e-4, atol=1e-6, msg=name)
    with pytest.raises(ValueError, match="more than"):
        pad_batch(batch, 16, Ids.pad)


def test_micro_batch_choices():
    assert micro_batch_candidates(2048) == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
    assert micro_batch_candidates(24) == [1, 2, 4, 8]
    assert cpu_micro_batch(2048) == 16 and cpu_micro_batch(24) == 8 and cpu_micro_batch(3) == 1
    calls = []
    assert resolve_micro_batch(2048, torch.device("cpu"), calls.append, 10**6, False) == 16
    assert calls == []  # no probe on CPU


def test_settings():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert not use_compile("auto", cpu, 2) and use_compile("auto", cuda, 2) and not use_compile("auto", cuda, 3)
    assert use_compile("true", cpu, 2) and not use_compile("false", cuda, 0)
    cfg = Config()
    cfg.train.micro_batch_size = "32"
    validate(cfg)
    assert cfg.train.micro_batch_size == 32
    cfg.train.micro_batch_size = "auto"
    validate(cfg)
    for bad in ("big", 0):
        cfg.train.micro_batch_size = bad
        with pytest.raises(SystemExit, match="micro_batch_size"):
            validate(cfg)
    cfg.train.micro_batch_size, cfg.train.compile = 16, "maybe"
    with pytest.raises(SystemExit, match="train.compile"):
        validate(cfg)


def test_bf16_zero2_sums_gradients_in_float32():
    from trainer.pretrain import deepspeed_config

    cfg = Config()
    cfg.train.global_batch_size, cfg.train.micro_batch_size = 64, 16
    for bf16, stage, expected in (("true", 2, "fp32"), ("true", 1, None), ("false", 2, None)):
        cfg.train.bf16, cfg.train.zero_stage = bf16, stage
        ds = deepspeed_config(cfg, world_size=1, universal=False)
        assert ds.get("data_types", {}).get("grad_accum_dtype") == expected, (bf16, stage)
        assert ds["gradient_accumulation_steps"] == 4 and ds["zero_optimization"]["stage"] == stage
