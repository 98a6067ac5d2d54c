"""Training examples decoded from the corpus's passages: exact text around exact mentions."""
from __future__ import annotations

import pyarrow.dataset as ds

from linker.corpus_data import iter_examples, load_corpus_tokenizer, shuffled


def test_examples_rebuild_the_passage_text_around_the_anchor(sample_corpus):
    examples = list(iter_examples(str(sample_corpus), "validation"))
    rows = {r["passage_id"]: r for r in ds.dataset(sample_corpus / "passages").to_table().to_pylist()}
    tokenizer = load_corpus_tokenizer(str(sample_corpus))
    assert examples and all(e.source == "hyperlink" and e.entity_id >= 3 for e in examples)
    hyperlinks = sum(m["source"] == "hyperlink" and m["entity_id"] >= 3
                     for r in rows.values() if r["passage_id"] in {e.passage_id for e in examples} for m in r["mentions"])
    assert len(examples) == hyperlinks
    for e in examples:
        text = tokenizer.decode(rows[e.passage_id]["token_ids"])
        assert e.context.left + e.context.mention + e.context.right == text
        assert e.context.mention == e.surface


def test_limit_and_sources(sample_corpus):
    assert len(list(iter_examples(str(sample_corpus), "train", limit=7))) == 7
    labels = list(iter_examples(str(sample_corpus), "train", sources=("title_alias",), limit=20))
    assert labels and {e.source for e in labels} == {"title_alias"}


def test_streaming_shuffle_keeps_every_item():
    items = list(range(100))
    out = list(shuffled(iter(items), buffer_size=10, seed=1))
    assert sorted(out) == items and out != items
