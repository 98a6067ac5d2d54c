"""Training the bi-encoder on the sample corpus's hyperlinks: accuracy rises above chance;
the evaluation reports the alias-prior baseline beside it; the result loads like BLINK's release."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from linker.train import BertShape, TrainConfig, in_batch_targets, initial_model, lr_at, train

pytestmark = pytest.mark.slow

STEPS = 200


def tiny_config(corpus, output, vocab) -> TrainConfig:
    return TrainConfig(corpus=str(corpus), output=str(output), vocab=str(vocab),
                       bert=BertShape(hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                                      intermediate_size=256, max_position_embeddings=64, dropout=0.0),
                       max_context_length=32, max_cand_length=32, batch_size=32, max_steps=STEPS, lr=1e-3,
                       shuffle_buffer=2000, log_every=50, seed=7, torch_threads=1)


def test_in_batch_targets_make_one_column_per_entity():
    assert in_batch_targets([7, 3, 7, 9]) == ([7, 3, 9], [0, 1, 0, 2])


def test_learning_rate_warms_up_then_decays():
    rates = [lr_at(s, 100, 0.1) for s in range(100)]
    assert rates[0] == pytest.approx(0.1) and rates[9] == pytest.approx(1.0)
    assert rates[50] > rates[90] > 0 and max(rates) == 1.0


def test_training_beats_chance_and_the_model_folder_loads(sample_corpus, sample_vocab, tmp_path):
    from linker.biencoder import load_biencoder
    from linker.catalogue import read_alias_index, read_catalogue
    from linker.corpus_data import iter_examples
    from linker.evaluate import evaluate_biencoder
    from linker.evaluate import main as evaluate_main

    config = tiny_config(sample_corpus, tmp_path / "model", sample_vocab)
    catalogue = read_catalogue(str(sample_corpus))
    aliases = read_alias_index(str(sample_corpus), catalogue.id_of_title())
    validation = list(iter_examples(str(sample_corpus), "validation"))
    before = evaluate_biencoder(initial_model(config, catalogue), catalogue, aliases, validation)

    import torch

    threads = torch.get_num_threads()
    try:
        final = train(config)  # torch_threads=1: deterministic, and fastest on a shared 2-core machine
    finally:
        torch.set_num_threads(threads)

    chance = final["chance@1"]
    assert final["biencoder"]["mentions"] == len(validation) > 50
    assert before["biencoder"]["accuracy@1"] <= 2 * chance + 1 / len(validation)  # untrained: about chance
    assert final["biencoder"]["accuracy@1"] >= 5 * chance, final
    assert final["biencoder"]["recall@10"] >= before["biencoder"]["recall@10"] + 0.05, (before, final)
    assert final["biencoder"]["recall@10"] >= 3 * 10 * chance
    # On this sample every anchor text names one entity: the baseline is perfect, as it should be.
    assert final["alias_prior"]["accuracy@1"] == 1.0

    folder = tmp_path / "model"
    assert {p.name for p in folder.iterdir()} >= {"biencoder.bin", "biencoder.json", "vocab.txt", "metrics.json"}
    assert json.loads((folder / "metrics.json").read_text())["final"]["biencoder"] == final["biencoder"]
    loaded = load_biencoder(str(folder))
    again = evaluate_biencoder(loaded, catalogue, aliases, validation)
    assert again["biencoder"] == final["biencoder"]  # what was saved is what was evaluated

    report = tmp_path / "eval.json"
    assert evaluate_main(["--model", str(folder), "--corpus", str(sample_corpus), "--output", str(report)]) == 0
    assert json.loads(report.read_text())["biencoder"]["accuracy@1"] == pytest.approx(final["biencoder"]["accuracy@1"])


def test_the_committed_vocab_is_one_build_vocab_makes(sample_corpus, sample_vocab, tmp_path):
    """The committed sample vocabulary (conftest.sample_vocab) is what build_vocab makes of the sample corpus today,
    but for the trainer's tie-breaking: the reserved tokens first, and nearly every piece in common."""
    from linker.catalogue import read_catalogue
    from linker.corpus_data import iter_examples
    from linker.wordpiece import RESERVED_TOKENS, build_vocab

    catalogue = read_catalogue(str(sample_corpus))
    texts = [*catalogue.titles, *catalogue.descriptions,
             *(f"{e.context.left} {e.context.mention} {e.context.right}" for e in iter_examples(str(sample_corpus), "train"))]
    fresh = Path(build_vocab(texts, str(tmp_path / "vocab.txt"), vocab_size=1000)).read_text().split("\n")
    committed = sample_vocab.read_text().split("\n")
    assert tuple(committed[:len(RESERVED_TOKENS)]) == RESERVED_TOKENS
    assert len(set(fresh) & set(committed)) >= 0.95 * max(len(set(fresh)), len(set(committed)))
