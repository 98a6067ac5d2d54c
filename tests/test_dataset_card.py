"""The dataset card (OUT/README.md) of real job outputs: Hugging Face front matter whose
data_files match the files, a body with the dump, counters and schema, and (when the
`datasets` package is installed) `datasets.load_dataset(OUT)` reading the folder through it."""
from __future__ import annotations

import fnmatch
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipelines.dataset_card import data_files, files_per_split, render_card, size_category, write_dataset_card
from pipelines.validate import validate_output
from tests.corpus_checks import manifest as read_manifest

pytestmark = pytest.mark.slow  # the fixtures run the corpus job
HAVE_DATASETS = importlib.util.find_spec("datasets") is not None


def front_matter_and_body(card: Path) -> tuple[dict, str]:
    text = card.read_text(encoding="utf-8")
    assert text.startswith("---\n")
    head, body = text[4:].split("\n---\n", 1)
    return yaml.safe_load(head), body


def _copy(corpus: Path, tmp_path: Path) -> Path:
    out = tmp_path / "corpus"
    shutil.copytree(corpus, out)
    return out


def _split_files(front: dict) -> dict[str, object]:
    default = next(c for c in front["configs"] if c["config_name"] == "default")
    return {d["split"]: d["path"] for d in default["data_files"]}


def test_card_of_the_206_page_enwiki_run(enwiki206_corpus: Path, tmp_path: Path):
    out = _copy(enwiki206_corpus, tmp_path)
    (out / "README.md").unlink()  # the job wrote one already; write it again from the manifest
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    path = write_dataset_card(str(out))
    assert path == str(out / "README.md")
    after = sorted(p.relative_to(out) for p in out.rglob("*"))
    assert sorted(set(after) - set(before)) == [Path("README.md")]  # nothing else written or left behind
    validate_output(str(out))  # the card does not disturb the run

    m = read_manifest(out)
    front, body = front_matter_and_body(out / "README.md")
    assert front["license"] == "cc-by-sa-4.0" and front["language"] == ["en"]
    assert {"wikipedia", "entity-linking"} <= set(front["tags"]) and front["task_categories"]
    total = sum(m["summary"]["passages"].values())
    assert front["size_categories"] == [size_category(total)] == ["n<1K" if total < 1000 else "1K<n<10K"]
    splits = _split_files(front)
    assert splits == {"train": "passages/train-*.parquet", "validation": "passages/validation-*.parquet"}
    for split, glob in splits.items():
        on_disk = sorted(str(p.relative_to(out)) for p in out.glob(glob))
        in_manifest = sorted(f["path"] for f in m["files"] if fnmatch.fnmatchcase(f["path"], glob))
        assert on_disk == in_manifest and len(on_disk) == m["job"]["read_ranges"]  # one file per range and split
    n = len(list(out.glob("passages/train-*.parquet")))
    assert f"| files per split | train {n}, validation {n} (one per unit of pass 2: a chunk of 10,000 cached" in body
    configs = {c["config_name"] for c in front["configs"]}
    assert {"default", "entity_vocab", "alias_table"} <= configs

    c = m["counters"]
    assert "enwiki" in body and m["job"]["input"] in body
    assert "| `same_page_alias` |" in body and f"| {c['mentions/same_page_alias']:,} |" in body
    ratio = f"x{m['summary']['mention_ratio_to_hyperlinks']:.2f}"
    assert ratio in body
    for column in ("passage_id", "token_ids", "mentions", "char_start"):
        assert f"| `{column}` |" in body
    assert "datasets.load_dataset" in body and "cc-by-sa-4.0" in body
    first = (out / "README.md").read_bytes()
    write_dataset_card(str(out), m)
    assert (out / "README.md").read_bytes() == first  # deterministic; a given manifest or the file's: same card


def test_the_card_counts_the_files_per_split_the_manifest_lists():
    """The card says how many passages files each split has, as written (the manifest's list), and what a file
    holds; a manifest of an earlier version (its num_shards, no cache_chunk_articles) gets the counts alone."""
    files = [{"path": f"passages/{split}-{i:05d}-of-00003.parquet", "rows": 2, "kind": "passages"}
             for split in ("train", "validation") for i in range(3)]
    files.append({"path": "entity_descriptions/entity_descriptions-00000-of-00003.parquet", "rows": 1,
                  "kind": "entity_descriptions"})
    config = {"cache_chunk_articles": 10000, "article_cache": True}
    assert files_per_split({"files": files, "config": config}) == ("train 3, validation 3 (one per unit of pass 2: a "
                                                                   "chunk of 10,000 cached articles; every unit writes "
                                                                   "both splits' files, empty or not)")
    rows = [line for line in render_card({"files": files, "config": config}).splitlines() if "per split" in line]
    assert rows == [f"| files per split | {files_per_split({'files': files, 'config': config})} |"]
    uncached = {"files": files[:4], "config": {**config, "article_cache": False}}
    assert files_per_split(uncached) == ("train 3, validation 1 (one per unit of pass 2: a read range; every unit "
                                         "writes both splits' files, empty or not)")
    old = {"files": files, "config": {"num_shards": 8}}
    assert files_per_split(old) == "train 3, validation 3"
    assert "num_shards" not in "".join(line for line in render_card(old).splitlines() if line.startswith("| "))


def test_empty_shards_and_splits_are_listed_so_datasets_can_read_them():
    files = [
        {"path": "passages/train-00000-of-00002.parquet", "rows": 5, "kind": "passages"},
        {"path": "passages/train-00001-of-00002.parquet", "rows": 0, "kind": "passages"},
        {"path": "passages/validation-00000-of-00002.parquet", "rows": 0, "kind": "passages"},
        {"path": "passages/validation-00001-of-00002.parquet", "rows": 0, "kind": "passages"},
        {"path": "alias_table/alias_table-00000-of-00001.parquet", "rows": 3, "kind": "alias_table"},
    ]
    m = {"files": files}
    assert data_files(m, "passages/train-*.parquet") == ["passages/train-00000-of-00002.parquet"]
    assert data_files(m, "passages/validation-*.parquet") is None
    assert data_files(m, "alias_table/alias_table-*.parquet") == "alias_table/alias_table-*.parquet"


@pytest.mark.skipif(not HAVE_DATASETS, reason="the `datasets` package is not installed (front matter checked above)")
@pytest.mark.parametrize("corpus_fixture", ["enwiki206_corpus", "sample_corpus"])
def test_datasets_load_dataset_reads_the_folder_through_its_card(corpus_fixture, request, tmp_path: Path):
    corpus = request.getfixturevalue(corpus_fixture)
    out = _copy(corpus, tmp_path)
    write_dataset_card(str(out))
    m = read_manifest(out)
    script = (
        "import json, sys, datasets\n"
        "d = datasets.load_dataset(sys.argv[1])\n"
        "v = datasets.load_dataset(sys.argv[1], 'entity_vocab', split='train')\n"
        "row = d['train'][0]\n"
        "print(json.dumps({'splits': {k: d[k].num_rows for k in d}, 'vocab': v.num_rows,\n"
        "                  'columns': d['train'].column_names, 'mention_keys': sorted(row['mentions'][0]) if row['mentions'] else []}))\n"
    )
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    proc = subprocess.run([sys.executable, "-c", script, str(out)], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    expected = {k: v for k, v in m["summary"]["passages"].items() if v}
    assert got["splits"] == expected
    assert got["vocab"] == next(f["rows"] for f in m["files"] if f["kind"] == "entity_vocab")
    assert got["columns"] == ["passage_id", "page_id", "title", "window_index", "char_offset", "text", "token_ids",
                              "mentions"]
    assert not got["mention_keys"] or {"entity", "entity_id", "source", "token_start"} <= set(got["mention_keys"])
