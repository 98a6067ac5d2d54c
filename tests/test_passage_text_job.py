"""The corpus job with and without ``--passage_text``, and the readers of passages on
every version: the trainer, the linker's examples and the validator read corpora
with text, without text, and of schema version 1 (written before the text existed)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines import storage
from pipelines.transforms.write import schema_fingerprint
from pipelines.validate import InvalidOutputError, validate_output
from schemas import PASSAGE_SCHEMA, PASSAGE_SCHEMA_NO_TEXT, PASSAGE_SCHEMA_V1
from tests.conftest import SHARED_DUMP_JOB_ARGS, dump, needs_shared, run_job_here
from tests.corpus_checks import check_passage_contract, manifest

pytestmark = [pytest.mark.slow, needs_shared]
DUMP = "simplewiki-2019-7pages.xml.bz2"


@pytest.fixture(scope="module")
def runs(tmp_path_factory, shared_dump_corpus) -> dict[bool, Path]:
    """The session's run of DUMP (text on: the default) and the same run with --passage_text false."""
    without = tmp_path_factory.mktemp("text_False")
    run_job_here(dump(DUMP), without, *SHARED_DUMP_JOB_ARGS, "--passage_text", "false")
    return {True: shared_dump_corpus(DUMP), False: without}


def _rows(out: Path) -> list[dict]:
    return [r for f in sorted((out / "passages").glob("*.parquet")) for r in pq.read_table(f).to_pylist()]


def test_passage_text_false_leaves_only_the_text_column_out(runs):
    with_text, without = runs[True], runs[False]
    check_passage_contract(with_text, text=True)
    check_passage_contract(without, text=False)
    for f in (without / "passages").glob("*.parquet"):
        assert "text" not in pq.read_schema(f).names
    rows, bare = _rows(with_text), _rows(without)
    assert rows and [{k: v for k, v in r.items() if k != "text"} for r in rows] == bare
    m_text, m_bare = manifest(with_text), manifest(without)
    assert m_text["config"]["passage_text"] is True and m_bare["config"]["passage_text"] is False
    assert m_text["schemas"]["passages"] == schema_fingerprint(PASSAGE_SCHEMA)
    assert m_bare["schemas"]["passages"] == schema_fingerprint(PASSAGE_SCHEMA_NO_TEXT)
    assert m_text["schema_versions"]["passages"] == m_bare["schema_versions"]["passages"] == "2"
    assert m_text["format_version"] == 2
    card = (without / "README.md").read_text()
    assert "`char_offset`" in card and "| `text` |" not in card
    assert "| `text` |" in (with_text / "README.md").read_text()


def _as_version_1(src: Path, dst: Path) -> Path:
    """A copy of a corpus as the job wrote it before passage text: schema 1, article offsets."""
    shutil.copytree(src, dst)
    m = json.loads((dst / "manifest.json").read_text())
    for entry in m["files"]:
        if entry["kind"] != "passages":
            continue
        path = dst / entry["path"]
        rows = pq.read_table(path).to_pylist()
        for r in rows:
            offset = r.pop("char_offset")
            r.pop("text", None)
            for mention in r["mentions"]:
                mention["char_start"] += offset
                mention["char_end"] += offset
        pq.write_table(pa.Table.from_pylist(rows, schema=PASSAGE_SCHEMA_V1), path, compression="zstd")
        entry["sha256"], entry["bytes"] = storage.sha256_of_file(str(path))
    m["format_version"] = 1
    m["schemas"]["passages"] = schema_fingerprint(PASSAGE_SCHEMA_V1)
    m.pop("schema_versions")
    (dst / "manifest.json").write_text(json.dumps(m))
    return dst


@pytest.mark.parametrize("version", ["2 with text", "2 without text", "1"])
def test_readers_of_passages_read_every_version(runs, tmp_path, version):
    from linker.corpus_data import iter_examples
    from trainer.data import Collator, GlobalSampleOrder, TrainBatches, load_tokenizer, open_corpus

    out = {"2 with text": runs[True], "2 without text": runs[False]}.get(version)
    if out is None:
        out = _as_version_1(runs[True], tmp_path / "v1")
        assert pq.read_schema(next((out / "passages").glob("train-*.parquet"))).names == PASSAGE_SCHEMA_V1.names
    validate_output(str(out))
    corpus = open_corpus(out)
    _tok, ids = load_tokenizer(corpus.tokenizer_dir)
    batches = TrainBatches(GlobalSampleOrder(corpus.train_shards, seed=1, window_row_groups=1),
                           Collator(ids, 160, 0.3, 0.5, 1), 4, 2, 0, 1)
    batch = next(batches)
    assert batch and batch[0]["input_ids"].shape[0] == 2
    examples = list(iter_examples(str(out), "train", limit=20))
    assert len(examples) == 20 and all(e.surface.strip() == e.context.mention for e in examples)


def test_a_shard_unlike_the_manifests_schema_is_refused(runs, tmp_path):
    """A shard with text among a corpus whose manifest says without (mixed outputs) is an error."""
    mixed = tmp_path / "mixed"
    shutil.copytree(runs[False], mixed)
    m = json.loads((mixed / "manifest.json").read_text())
    entry = next(e for e in m["files"] if e["kind"] == "passages" and e["rows"])
    shutil.copy(runs[True] / entry["path"], mixed / entry["path"])
    entry["sha256"], entry["bytes"] = storage.sha256_of_file(str(mixed / entry["path"]))
    (mixed / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(InvalidOutputError, match="manifest.json records"):
        validate_output(str(mixed))
