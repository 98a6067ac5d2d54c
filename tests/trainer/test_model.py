"""EDMem forward/backward on a tiny model built from a config (no download)."""
import pytest
import torch

from trainer.config import load_config
from trainer.data import Collator, GlobalSampleOrder, TrainBatches, open_corpus
from trainer.model import EDMem, EDMemSpec
from trainer.pretrain import MODEL_INPUTS, lr_lambda


@pytest.fixture(scope="module")
def setup(corpus_dir, tokenizer_and_ids):
    _, ids = tokenizer_and_ids
    cfg = load_config("configs/pretrain/tiny.yaml", ["--model.dropout=0.0", "--model.entity_block_size=50"])
    corpus = open_corpus(corpus_dir)
    spec = EDMemSpec(cfg.model, ids.vocab_size, corpus.n_entities, ids.pad, ids.entity_start, ids.eos)
    order = GlobalSampleOrder(corpus.train_shards, 0, 2)
    batch = next(TrainBatches(order, Collator(ids, 160, 0.3, 0.5, 0), 4, 4, 0, 1))[0]
    return spec, ids, {k: batch[k] for k in MODEL_INPUTS}


def test_split_layers_and_one_shared_table(setup):
    spec, _, _ = setup
    model = EDMem(spec)
    assert len(model.encoder.lower) == spec.model.lower_layers and len(model.decoder.upper) == spec.model.upper_layers
    tables = [n for n, p in model.named_parameters() if p.shape == (spec.n_entities, spec.model.entity_dim)]
    assert tables == ["entity_memory.table"]


def test_loss_and_gradients_reach_the_entity_table(setup):
    spec, _, batch = setup
    torch.manual_seed(0)
    model = EDMem(spec)
    out = model(**batch)
    assert out["el_head_count"] > 0 and torch.isfinite(out["loss"])
    out["loss"].backward()
    grad = model.entity_memory.table.grad
    assert grad is not None and grad.abs().sum() > 0
    assert model.encoder.memory_access.query_proj.weight.grad.abs().sum() > 0


def test_batch_without_mentions_has_a_finite_loss(setup):
    spec, ids, batch = setup
    model = EDMem(spec)
    plain = dict(batch)
    for key in ("input_ids", "decoder_input_ids", "labels"):  # replace every marker by an ordinary token
        plain[key] = batch[key].masked_fill(batch[key].eq(ids.entity_start) | batch[key].eq(ids.entity_end), 100)
    out = model(**plain)
    assert out["el_head_count"] == 0
    assert torch.isfinite(out["loss"]) and out["el_loss"] == 0
    out["loss"].backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_eval_mode_reads_top_k_and_is_deterministic(setup):
    spec, _, batch = setup
    model = EDMem(spec).eval()
    with torch.no_grad():
        a, b = model(**batch), model(**batch)
    assert torch.equal(a["loss"], b["loss"])


def test_few_steps_on_one_batch_reduce_both_losses(setup):
    spec, _, batch = setup
    torch.manual_seed(0)
    model = EDMem(spec)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    first = model(**batch)
    for _ in range(8):
        out = model(**batch)
        opt.zero_grad()
        out["loss"].backward()
        opt.step()
    last = model(**batch)
    assert last["lm_loss"] < first["lm_loss"] - 0.5 and last["el_loss"] < first["el_loss"]


def test_schedule_warms_up_then_decays_linearly():
    f = lr_lambda(100, 0.1)
    assert f(0) == pytest.approx(0.1) and f(9) == pytest.approx(1.0)
    assert f(55) == pytest.approx(0.5) and f(100) == 0.0


def test_config_overrides():
    cfg = load_config("configs/pretrain/base.yaml", ["--model.entity_dim=64", "--optim.lr", "3e-4", "--data", "/x",
                                                     "--max_steps", "7", "--train.bf16", "false"])
    assert cfg.model.entity_dim == 64 and cfg.optim.lr == 3e-4 and cfg.data.path == "/x"
    assert cfg.train.max_steps == 7 and cfg.train.bf16 == "false"
    base = load_config("configs/pretrain/base.yaml")
    m, o, t = base.model, base.optim, base.train
    assert (m.d_model, m.attention_heads, m.ffn_dim, m.lower_layers, m.upper_layers, m.entity_dim) == \
        (1024, 16, 4096, 4, 8, 256)
    assert (t.global_batch_size, t.max_steps, o.lr, o.warmup_fraction, o.weight_decay, o.grad_clip) == \
        (2048, 1_000_000, 1e-4, 0.1, 0.01, 0.1)
    with pytest.raises(SystemExit, match="unknown option --model.nope"):
        load_config(None, ["--model.nope=1"])


def test_init_from_a_local_bart_checkpoint(setup, tmp_path):
    from transformers import BartModel

    from trainer.export import load_bart_weights
    from trainer.model import bart_config

    spec, _, _ = setup
    bart = BartModel(bart_config(spec))
    bart.save_pretrained(tmp_path / "bart")
    model = EDMem(spec)
    load_bart_weights(model, str(tmp_path / "bart"))
    l1 = spec.model.lower_layers
    assert torch.equal(model.encoder.lower[0].fc1.weight, bart.encoder.layers[0].fc1.weight)
    assert torch.equal(model.decoder.upper[0].encoder_attn.q_proj.weight, bart.decoder.layers[l1].encoder_attn.q_proj.weight)
    assert torch.equal(model.shared.weight, bart.shared.weight)


def test_command_line_accepts_launcher_flags():
    from trainer.pretrain import parse_args

    cfg = parse_args(["--local_rank=1", "--deepspeed", "--deepspeed_config", "configs/deepspeed/zero3.json",
                      "--config", "configs/pretrain/tiny.yaml", "--data", "/d", "--output_dir", "/r", "--max_steps",
                      "5", "--optim.lr=1e-3"])
    assert cfg.train.deepspeed_config == "configs/deepspeed/zero3.json" and cfg.data.path == "/d"
    assert cfg.train.output_dir == "/r" and cfg.train.max_steps == 5 and cfg.optim.lr == 1e-3
    assert cfg.model.d_model == 64  # from tiny.yaml


def test_el_loss_is_the_mean_of_the_three_reads(setup):
    """EDMem averages the three reads' EL losses; the sum would weigh EL 3x at lambda 1 (issue 30)."""
    spec, _, batch = setup
    torch.manual_seed(0)
    model = EDMem(spec, el_weight=0.7)
    out = model(**batch)
    reads = [out[f"el_{r}_sum"] / out[f"el_{r}_count"] for r in ("enc", "dec", "head")]
    assert all(out[f"el_{r}_count"] > 0 for r in ("enc", "dec", "head"))
    torch.testing.assert_close(out["el_loss"], sum(reads) / 3)
    assert not torch.isclose(out["el_loss"], sum(reads))  # the sum differs: the check bites
    torch.testing.assert_close(out["loss"], out["lm_loss"] + 0.7 * out["el_loss"])
    torch.testing.assert_close(out["el_term"].detach(), 0.7 * out["el_loss"])
    from trainer.metrics import summarize
    sums = {k: float(out[k]) for k in out if k.startswith("el_") and k.endswith(("sum", "count", "correct"))}
    sums.update(lm_sum=float(out["lm_sum"]), lm_tokens=float(out["lm_tokens"]), el_correct_masked=0.0, el_masked=0.0,
                el_correct=0.0, dropped_mentions=0, truncated_tokens=0)
    assert summarize(sums, 0.7)["el_loss"] == pytest.approx(float(out["el_loss"]), rel=1e-5)


def test_loss_grad_norms_are_the_terms_gradients_and_leave_grads_alone(setup):
    spec, _, batch = setup
    from trainer.metrics import loss_grad_norms

    torch.manual_seed(0)
    model = EDMem(spec)
    norms = loss_grad_norms(model, batch)
    assert set(norms) == {"lm_grad_norm", "el_grad_norm"}
    assert all(p.grad is None for p in model.parameters())  # nothing accumulated into .grad
    for key, term in (("lm_grad_norm", "lm_term"), ("el_grad_norm", "el_term")):  # the same by plain backward
        model.zero_grad(set_to_none=True)
        model(**batch)[term].backward()
        ref = torch.sqrt(sum((p.grad ** 2).sum() for p in model.parameters() if p.grad is not None))
        assert norms[key] == pytest.approx(float(ref), rel=1e-4)
    spec_none = EDMemSpec(**{**spec.__dict__, "model": type(spec.model)(**{**spec.model.__dict__, "memory": "none"})})
    assert set(loss_grad_norms(EDMem(spec_none), batch)) == {"lm_grad_norm"}
