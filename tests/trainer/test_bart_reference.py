"""An external reference for the backbone: with the memory reads off, EDMem is BART.

transformers' BartForConditionalGeneration, built from the same config (no download) and
saved locally, is loaded into EDMem through the real ``--init_from`` path
(``load_bart_weights``); the LM logits of both must agree to 1e-5 on a padded batch.
"""
import pytest
import torch
from transformers import BartForConditionalGeneration

from trainer.config import load_config
from trainer.export import load_bart_weights
from trainer.model import EDMem, EDMemSpec, bart_config

VOCAB, PAD, ES, EOS = 211, 1, 209, 2


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    cfg = load_config("configs/pretrain/tiny.yaml", ["--model.dropout=0.0", "--model.lower_layers=2",
                                                     "--model.upper_layers=1"])
    spec = EDMemSpec(cfg.model, VOCAB, 50, PAD, ES, EOS)
    torch.manual_seed(0)
    bart = BartForConditionalGeneration(bart_config(spec)).eval()
    path = tmp_path_factory.mktemp("bart")
    bart.save_pretrained(path)
    model = EDMem(spec).eval()
    load_bart_weights(model, str(path))
    return spec, bart, model


def _batch(seed: int):
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(3, VOCAB - 2, (3, 17), generator=g)
    attention_mask = torch.ones_like(input_ids, dtype=torch.bool)
    attention_mask[1, 12:] = False  # a padded row: the encoder must ignore its pads
    attention_mask[2, 5:] = False
    input_ids[~attention_mask] = PAD
    decoder_input_ids = torch.cat([torch.full((3, 1), EOS), torch.randint(3, VOCAB - 2, (3, 16), generator=g)], 1)
    return input_ids, attention_mask, decoder_input_ids


@pytest.mark.parametrize("seed", [0, 1])
def test_logits_equal_transformers_bart_with_the_memory_off(pair, seed):
    _, bart, model = pair
    input_ids, attention_mask, decoder_input_ids = _batch(seed)
    with torch.no_grad():
        ours = model.lm_logits(input_ids, attention_mask, decoder_input_ids, use_memory=False)
        ref = bart(input_ids=input_ids, attention_mask=attention_mask.long(),
                   decoder_input_ids=decoder_input_ids).logits
    assert ours.shape == ref.shape == (3, 17, VOCAB)
    torch.testing.assert_close(ours, ref, rtol=0, atol=1e-5)


def test_the_reference_can_fail(pair):
    """The comparison is sensitive: one changed weight in one layer shows up in the logits."""
    _, bart, model = pair
    input_ids, attention_mask, decoder_input_ids = _batch(0)
    with torch.no_grad():
        before = model.lm_logits(input_ids, attention_mask, decoder_input_ids, use_memory=False)
        model.decoder.upper[0].fc2.weight[0, 0] += 0.5
        after = model.lm_logits(input_ids, attention_mask, decoder_input_ids, use_memory=False)
        model.decoder.upper[0].fc2.weight[0, 0] -= 0.5
    assert (after - before).abs().max() > 1e-3
