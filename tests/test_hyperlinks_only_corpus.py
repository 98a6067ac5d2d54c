"""--labels.hyperlinks_only: the corpus job with every labeller off, for the annotation ablation (docs/ablation.md).

Both corpora come from real job runs on the same real dump: the hyperlinks-only corpus must have the labelled
corpus's pages, split, windows and entity vocabulary, and exactly its hyperlinks, with no label.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipelines.config import WikiMentionsConfig
from pipelines.corpus.labels import AliasCandidate, LabelConfig, label_missing_mentions
from pipelines.records import Mention
from schemas.corpus import MentionSource
from tests.conftest import dump, needs_shared, run_job_here

DUMP = "simplewiki-2019-7pages.xml.bz2"
ARGS = ("--keep_red_links", "true", "--validation_fraction", "0.5")


def test_hyperlinks_only_labels_nothing():
    text = "Paris is big. Paris has a river."
    links = [Mention(0, 5, "Paris", "Paris", MentionSource.HYPERLINK)]
    candidates = [AliasCandidate("Paris", "Paris", 1, 1.0, "linked", ("anchor",))]
    assert label_missing_mentions(text, links, candidates, LabelConfig())  # the check can fail: labels exist
    assert label_missing_mentions(text, links, candidates, LabelConfig(hyperlinks_only=True)) == []


def test_hyperlinks_only_excludes_blink_labels():
    cfg = WikiMentionsConfig(input="x.xml", output="out", blink_model="m", blink_corpus="c",
                             labels=dataclasses.replace(LabelConfig(), hyperlinks_only=True))
    with pytest.raises(ValueError, match="hyperlinks_only"):
        cfg.validate()


def _passages(root: Path) -> dict[str, list[dict]]:
    out = {}
    for split in ("train", "validation"):
        rows = []
        for path in sorted((root / "passages").glob(f"{split}-*.parquet")):
            rows += pq.read_table(path, columns=["passage_id", "page_id", "token_ids", "mentions"]).to_pylist()
        out[split] = sorted(rows, key=lambda r: r["passage_id"])
    return out


@needs_shared
def test_hyperlinks_only_corpus_has_the_same_pages_split_windows_and_hyperlinks(tmp_path: Path):
    labelled, plain = tmp_path / "labelled", tmp_path / "hyperlinks"
    run_job_here(dump(DUMP), labelled, *ARGS)
    run_job_here(dump(DUMP), plain, *ARGS, "--labels.hyperlinks_only", "true")

    manifest = json.loads((plain / "manifest.json").read_text())
    assert manifest["config"]["labels"]["hyperlinks_only"] is True
    assert manifest["job"]["effective_labels"]["hyperlinks_only"] is True
    assert json.loads((labelled / "manifest.json").read_text())["config"]["labels"]["hyperlinks_only"] is False

    a, b = _passages(labelled), _passages(plain)
    val_pages = {r["page_id"] for r in b["validation"]}
    assert val_pages and {r["page_id"] for r in b["train"]}  # both splits hold pages: the check can fail
    assert val_pages == {r["page_id"] for r in a["validation"]}
    for split in ("train", "validation"):
        assert [(r["passage_id"], r["token_ids"]) for r in a[split]] == [(r["passage_id"], r["token_ids"])
                                                                         for r in b[split]]
        for ra, rb in zip(a[split], b[split]):
            assert all(m["source"] == MentionSource.HYPERLINK for m in rb["mentions"])
            assert [m for m in ra["mentions"] if m["source"] == MentionSource.HYPERLINK] == rb["mentions"]
    n_labels = sum(m["source"] != MentionSource.HYPERLINK for split in a.values() for r in split for m in r["mentions"])
    assert n_labels > 0  # the labelled corpus really has labels on this dump
    vocab = lambda root: pq.read_table(root / "entity_vocab" / "entity_vocab.parquet").to_pylist()  # noqa: E731
    assert vocab(labelled) == vocab(plain)
