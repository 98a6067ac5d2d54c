"""Fixtures of the trainer tests.

``corpus_dir`` is the corpus every trainer test reads. By default it is a small
synthetic corpus written by ``corpus_fixture.write_synthetic_corpus`` (the
pipeline's exact output contract); set WIKIEDM_TRAINER_CORPUS=/path/to/OUT to run
the same tests on a real pipeline output instead.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.trainer.corpus_fixture import write_synthetic_corpus

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def corpus_dir(tmp_path_factory) -> Path:
    real = os.environ.get("WIKIEDM_TRAINER_CORPUS")
    if real:
        return Path(real)
    return write_synthetic_corpus(tmp_path_factory.mktemp("corpus"), n_pages=240, n_entities=300, seed=0)


@pytest.fixture(scope="session")
def tokenizer_and_ids(corpus_dir):
    from trainer.data import load_tokenizer

    return load_tokenizer(corpus_dir / "tokenizer")
