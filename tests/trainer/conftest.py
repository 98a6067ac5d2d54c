"""Fixtures of the trainer tests.

``corpus_dir`` is the corpus every trainer test reads: the corpus job's real
output on the 206-page enwiki excerpt in ../shared/wikidumps (the session
fixture ``enwiki206_corpus``), or on the project's own sample dump when the
excerpts are absent. WIKIEDM_TRAINER_CORPUS=/path/to/OUT points the tests at
another finished corpus.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import HAVE_WIKIDUMPS

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def corpus_dir(request) -> Path:
    given = os.environ.get("WIKIEDM_TRAINER_CORPUS")
    if given:
        return Path(given)
    name = "enwiki206_corpus" if HAVE_WIKIDUMPS else "sample_corpus"
    return request.getfixturevalue(name)


@pytest.fixture(scope="session")
def tokenizer_and_ids(corpus_dir):
    from trainer.data import load_tokenizer

    return load_tokenizer(corpus_dir / "tokenizer")


@pytest.fixture(scope="session")
def trainer_runs(corpus_dir, tmp_path_factory):
    """Real training runs, each made once per session when a test first asks for it (tests/trainer/runs.py)."""
    from tests.trainer.runs import Runs

    return Runs(corpus_dir, tmp_path_factory.mktemp("trainer_runs"))
