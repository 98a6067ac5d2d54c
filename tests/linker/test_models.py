"""BLINK's models: released-checkpoint loading (BLINK's key names), exact outputs, save/load."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from linker.biencoder import encode_in_batches, load_biencoder, normalise_state_dict, save_model_folder, sub_state_dict
from linker.crossencoder import load_crossencoder
from linker.inputs import ContextText, cross_ids
from tests.linker.conftest import TINY_BERT, tiny_bert

CONTEXT = ContextText("The river passes the town of", "Elmarul", "in the north of the valley.")


def reference_bert(state: dict, prefix: str):
    """An independent BertModel with the checkpoint's weights (names fixed by hand)."""
    sub = {k[len(prefix) + 1:].replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias"): v
           for k, v in state.items() if k.startswith(prefix + ".")}
    bert = tiny_bert(sub["embeddings.word_embeddings.weight"].shape[0], seed=99)
    bert.load_state_dict(sub)
    return bert.eval()


def test_released_biencoder_loads_and_matches_bert_cls_vectors(fake_release):
    loaded = load_biencoder(str(fake_release))
    state = torch.load(fake_release / "biencoder_wiki_large.bin", weights_only=True)
    assert any(k.endswith("LayerNorm.gamma") for k in state)  # the fixture uses old BERT names: mapped on load
    config = loaded.model.context_encoder.bert_model.config
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads) == (128, 2, 2)
    assert loaded.params.max_context_length == 32 and loaded.params.max_cand_length == 128

    ids = loaded.inputs.contexts([CONTEXT])
    assert len(ids[0]) == 32
    tokens = loaded.inputs.tokenizer.convert_ids_to_tokens(ids[0])
    assert tokens[0] == "[CLS]" and "[unused0]" in tokens and "[unused1]" in tokens
    vec = loaded.model.encode_context(torch.tensor(ids)).detach()
    ref = reference_bert(state, "context_encoder.bert_model")
    t = torch.tensor(ids)
    expected = ref(input_ids=t, attention_mask=(t != 0).long(), token_type_ids=torch.zeros_like(t)).last_hidden_state[:, 0]
    torch.testing.assert_close(vec, expected.detach(), rtol=1e-5, atol=1e-5)

    cand = loaded.inputs.candidates(["Elmarul"], ["Elmarul is a town in Nornorar."])
    assert loaded.inputs.tokenizer.convert_ids_to_tokens(cand[0])[:3] == ["[CLS]", "elmarul", "[unused2]"]
    ref_cand = reference_bert(state, "cand_encoder.bert_model")
    c = torch.tensor(cand)
    expected_cand = ref_cand(input_ids=c, attention_mask=(c != 0).long()).last_hidden_state[:, 0]
    torch.testing.assert_close(loaded.model.encode_candidate(c).detach(), expected_cand.detach(), rtol=1e-5, atol=1e-5)
    score = loaded.model(t, c).detach().item()
    assert score == pytest.approx(float((expected @ expected_cand.T).detach()), rel=1e-4)


def test_encoding_in_batches_trims_padding_without_changing_vectors(fake_release):
    loaded = load_biencoder(str(fake_release))
    ids = loaded.inputs.candidates(["A b", "Elmarul"], ["short.", "Elmarul is a town in Nornorar. " * 10])
    batched = encode_in_batches(loaded.model.encode_candidate, ids, batch_size=2, pad_id=0)
    one_by_one = np.stack([loaded.model.encode_candidate(torch.tensor([i])).detach().numpy()[0] for i in ids])
    np.testing.assert_allclose(batched, one_by_one, rtol=1e-4, atol=1e-5)


def test_checkpoint_with_wrong_keys_is_refused(fake_release, tmp_path):
    state = torch.load(fake_release / "biencoder_wiki_large.bin", weights_only=True)
    broken = tmp_path / "broken"
    shutil.copytree(fake_release, broken)
    missing = {k: v for k, v in state.items() if "encoder.layer.1.output.dense.weight" not in k}
    torch.save(missing, broken / "biencoder_wiki_large.bin")
    with pytest.raises(ValueError, match="missing"):
        load_biencoder(str(broken))
    torch.save({**state, "context_encoder.additional_linear.weight": torch.zeros(1, 128)}, broken / "biencoder_wiki_large.bin")
    with pytest.raises(ValueError, match="outside the two BERT encoders"):
        load_biencoder(str(broken))
    (broken / "vocab.txt").unlink()
    with pytest.raises(FileNotFoundError, match="vocab.txt"):
        load_biencoder(str(broken))


def test_saved_model_folder_reloads_identically(fake_release, tmp_path):
    loaded = load_biencoder(str(fake_release))
    save_model_folder(loaded.model.state_dict(), loaded.params, str(tmp_path), "biencoder", loaded.vocab_path)
    saved = torch.load(tmp_path / "biencoder.bin", weights_only=True)
    assert {k.split(".bert_model.")[0] for k in saved} == {"context_encoder", "cand_encoder"}  # BLINK's layout
    again = load_biencoder(str(tmp_path))
    ids = torch.tensor(loaded.inputs.contexts([CONTEXT]))
    torch.testing.assert_close(again.model.encode_context(ids), loaded.model.encode_context(ids))


def test_normalise_state_dict_maps_old_names():
    out = normalise_state_dict({"module.a.LayerNorm.gamma": 1, "module.a.LayerNorm.beta": 2,
                                "x.embeddings.position_ids": 3, "b.weight": 4})
    assert out == {"a.LayerNorm.weight": 1, "a.LayerNorm.bias": 2, "b.weight": 4}
    assert sub_state_dict({"p.q.r": 1, "pq.r": 2}, "p") == {"q.r": 1}


def test_released_crossencoder_scores_pooler_through_its_linear_layer(fake_release):
    cross = load_crossencoder(str(fake_release))
    assert cross is not None and cross.params.add_linear
    bi = load_biencoder(str(fake_release))
    context = cross.inputs.contexts([CONTEXT])[0]
    cands = cross.inputs.candidates(["Elmarul", "Nornorar"], ["Elmarul is a town.", "Nornorar is a region."])
    scores = cross.model.score(context, cands, cross.params.max_seq_length)
    assert scores.shape == (2,) and scores[0] != scores[1]

    state = torch.load(fake_release / "crossencoder_wiki_large.bin", weights_only=True)
    ref = reference_bert(state, "encoder.bert_model")
    pair = torch.tensor([cross_ids(context, cands[0], cross.params.max_seq_length)])
    segments = torch.zeros_like(pair)
    segments[:, 32:] = (pair[:, 32:] != 0).long()  # the candidate part is segment 1
    pooled = ref(input_ids=pair, token_type_ids=segments, attention_mask=(pair != 0).long()).pooler_output
    expected = pooled @ state["encoder.additional_linear.weight"].T + state["encoder.additional_linear.bias"]
    assert scores[0] == pytest.approx(expected.item(), rel=1e-4, abs=1e-5)
    assert bi.inputs.special == cross.inputs.special


def test_folder_without_crossencoder_has_none(tmp_path, sample_vocab):
    from tests.linker.conftest import write_fake_release

    folder = write_fake_release(tmp_path / "bi_only", sample_vocab, with_crossencoder=False)
    assert load_crossencoder(str(folder)) is None
    assert TINY_BERT["hidden_size"] == load_biencoder(str(folder)).model.dim
