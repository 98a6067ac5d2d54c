"""On every shared dump's corpus, the default linker's accuracy@1 is >= the prior-only baseline's.

Each real excerpt in ../shared/wikidumps (a multistream twin once) goes through the corpus job as a user runs it
(``--keep_red_links true``), then ``linker.evaluate`` measures, on the corpus's validation
hyperlinks (its train split's when the validation pages hold none), the bi-encoder, the default
linker (model + alias prior, fitted there) and the alias prior alone. The model is an untrained
bi-encoder: its scores are noise, the worst case for a combination. A small trained model on the
206-page excerpt is checked too (the case of the issue: alone it links worse than the prior).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO, distinct_dumps, needs_shared

pytestmark = [pytest.mark.slow, needs_shared]

DUMPS = distinct_dumps()
EVAL = ["--fast", "true", "--limit", "300", "--fit_mentions", "300", "--torch_threads", "1"]


def untrained_release(folder: Path, corpus: Path) -> Path:
    """A bi-encoder in BLINK's layout with random weights and a vocabulary built from the corpus."""
    from linker.catalogue import read_catalogue
    from linker.wordpiece import build_vocab
    from tests.linker.conftest import BIENCODER_PARAMS, write_fake_release

    catalogue = read_catalogue(str(corpus))
    vocab = build_vocab([*catalogue.titles, *catalogue.descriptions], str(folder.parent / f"{folder.name}-vocab.txt"),
                        vocab_size=1000)
    write_fake_release(folder, Path(vocab), with_crossencoder=False)
    (folder / "biencoder_wiki_large.json").write_text(json.dumps({**BIENCODER_PARAMS, "max_cand_length": 32}))
    return folder


def evaluate(model: Path, corpus: Path, out: Path) -> dict:
    import torch

    from linker.evaluate import main

    threads = torch.get_num_threads()
    try:
        assert main(["--model", str(model), "--corpus", str(corpus), "--json", str(out), *EVAL]) == 0
    finally:
        torch.set_num_threads(threads)  # --torch_threads 1 must not outlive this test
    return json.loads(out.read_text())


def test_the_shared_dumps_are_all_here():
    assert len(DUMPS) >= 8, DUMPS


@pytest.mark.parametrize("name", DUMPS)
def test_default_linker_is_never_worse_than_the_alias_prior(name, tmp_path, request):
    if name == "enwiki-2016-206pages-articles1.xml.bz2":
        corpus = request.getfixturevalue("enwiki206_corpus")  # the session's run of this dump (--keep_red_links true)
    else:  # the session's run (tests/conftest.py: --keep_red_links true --validation_fraction 0.3)
        corpus = request.getfixturevalue("shared_dump_corpus")(name)
    metrics = evaluate(untrained_release(tmp_path / "model", corpus), corpus, tmp_path / "eval.json")
    assert metrics["mentions"] > 0, metrics
    linker, prior = metrics["linker"]["accuracy@1"], metrics["alias_prior"]["accuracy@1"]
    assert linker >= prior, (name, metrics)
    assert metrics["combiner"]["split"] == metrics["split"]  # fitted where it is measured
    assert set(metrics) >= {"biencoder", "linker", "alias_prior", "combiner"}


def test_a_small_trained_model_gains_from_the_prior(enwiki206_corpus, tmp_path):
    """The issue's case: a tiny bi-encoder alone links few mentions; combined, the linker beats both it
    and the prior alone (2-fold cross-fitted, so not only on the mentions the weights saw)."""
    from linker.train import main as train_main

    model = tmp_path / "model"
    assert train_main(["--config", str(REPO / "configs" / "linker" / "train_tiny.yaml"), "--corpus", str(enwiki206_corpus),
                       "--output", str(model), "--max_steps", "80", "--eval_every", "0", "--eval_examples", "200"]) == 0
    metrics = evaluate(model, enwiki206_corpus, tmp_path / "eval.json")
    bi, linker, prior = (metrics[k]["accuracy@1"] for k in ("biencoder", "linker", "alias_prior"))
    assert linker >= prior and linker > bi, metrics
    assert metrics["combiner"]["accuracy@1_cross_fitted"] >= bi, metrics
