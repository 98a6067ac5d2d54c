"""A corpus whose passages link entity ids outside its entity vocabulary (passages and vocabulary from
two different runs) fails with one clear line naming the corpus and the id: at start-up from the Parquet
statistics, and batch by batch where a shard has no statistics."""
import json
import os
import shutil
import subprocess
import sys

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from pipelines.storage import sha256_of_file
from tests.trainer.conftest import REPO
from trainer.data import Collator, CorpusError, GlobalSampleOrder, TrainBatches, open_corpus

KEEP_ENTITIES = 10


@pytest.fixture(scope="module")
def mixed_corpus(corpus_dir, tmp_path_factory):
    """The corpus with its vocabulary cut to the first 10 ids; the manifest made consistent with the cut file."""
    out = tmp_path_factory.mktemp("mixed") / "corpus"
    shutil.copytree(corpus_dir, out)
    vocab = out / "entity_vocab" / "entity_vocab.parquet"
    table = pq.read_table(vocab)
    pq.write_table(table.filter(pc.less(table["entity_id"], KEEP_ENTITIES)), vocab)
    manifest = json.loads((out / "manifest.json").read_text())
    for entry in manifest["files"]:
        if entry["path"] == "entity_vocab/entity_vocab.parquet":
            entry["sha256"], entry["bytes"] = sha256_of_file(str(vocab))
            entry["rows"] = KEEP_ENTITIES
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out


def test_open_corpus_finds_it_in_the_parquet_statistics(mixed_corpus):
    with pytest.raises(CorpusError, match=rf"{mixed_corpus}: passages/.*parquet links entity id \d+, outside .* 0\.\.9"):
        open_corpus(mixed_corpus)


def test_collator_names_the_corpus_and_the_id(corpus_dir, mixed_corpus, tokenizer_and_ids):
    _, ids = tokenizer_and_ids
    corpus = open_corpus(corpus_dir)  # the intact corpus's shards, checked against the cut vocabulary's size
    collator = Collator(ids, 160, 0.3, 0.5, 0, KEEP_ENTITIES, str(mixed_corpus))
    order = GlobalSampleOrder(corpus.train_shards, 0, 2)
    with pytest.raises(CorpusError, match=rf"{mixed_corpus}: passage .* links entity id \d+, outside .* 0\.\.9"):
        for _ in range(50):
            next(TrainBatches(order, collator, 8, 8, 0, 1))


def test_the_trainer_exits_with_one_line(mixed_corpus, tmp_path):
    cmd = [sys.executable, "-m", "trainer.pretrain", "--config", "configs/pretrain/tiny.yaml", "--data",
           str(mixed_corpus), "--output_dir", str(tmp_path / "run"), "--max_steps", "2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_PORT": "29781"}
    result = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("[pretrain] error: ") and str(mixed_corpus) in last and "entity id" in last
    assert "Traceback" not in result.stderr and "IndexError" not in result.stderr
