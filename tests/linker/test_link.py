"""The Linker on the sample corpus with a fake BLINK release; the Beam linking job; AddBlinkLabels."""
from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that

from linker.index import IndexConfig
from linker.link import Linker, LinkerConfig, merge_candidates
from pipelines.records import LabeledArticle, Mention
from pipelines.transforms.blink import AddBlinkLabels, add_blink_mentions
from pipelines.transforms.stats import SumStats
from tests.conftest import REPO

pytestmark = pytest.mark.slow


def config(model, corpus, **kw) -> LinkerConfig:
    return LinkerConfig(model=str(model), corpus=str(corpus), **kw)


@pytest.fixture(scope="module")
def linker(indexed_release, sample_corpus) -> Linker:
    return Linker(config(indexed_release, sample_corpus), build_encodings=False)


def kb_titles(linker) -> list[str]:
    return [linker.kb.title(r) for r in range(len(linker.kb))]


def two_titles(linker):
    names = [t for t in kb_titles(linker) if " " not in t]
    return names[0], names[1]


def test_links_detected_mentions_to_vocabulary_entities(linker):
    a, b = two_titles(linker)
    text = f"Is {a} bigger than {b}? Nobody knows."
    linked = linker.link_text(text)
    assert [(m.surface, text[m.start:m.end]) for m in linked] == [(a, a), (b, b)]
    ids = set(linker.kb.entity_ids.tolist())
    for m in linked:
        assert m.entity_id in ids and linker.kb.title(linker.kb.row_of_entity_id(m.entity_id)) == m.entity
        assert 0.0 < m.score <= 1.0 and m.origin in ("alias", "ner")  # "ner" when a spaCy pipeline is installed
        assert m.entity == m.surface  # an exact title: the alias prior and the title feature decide
    assert linker.crossencoder is not None  # the release has one: candidates were re-ranked


def test_given_spans_and_reranking_switch(indexed_release, sample_corpus, linker):
    a, _ = two_titles(linker)
    text = f"They met in {a} last year."
    span = (text.index(a), text.index(a) + len(a))
    plain = Linker(config(indexed_release, sample_corpus, crossencoder="no"))  # its own fitted combination
    assert plain.crossencoder is None
    with_cross, without = linker.link_spans(text, [span]), plain.link_spans(text, [span])
    assert [(m.start, m.end, m.origin) for m in with_cross] == [(*span, "given")] == [(m.start, m.end, m.origin) for m in without]
    assert with_cross[0].logit != without[0].logit  # a cross-encoder logit vs a dot product
    fast = Linker(config(indexed_release, sample_corpus, fast=True, combiner="default"), build_encodings=False)
    assert fast.crossencoder is None  # --fast: bi-encoder only, as BLINK's


def test_alias_candidates_join_the_retrieved_ones():
    assert merge_candidates([5, 2, -1], [2, 9]) == [5, 2, 9]


def test_hnsw_and_exact_linking_agree(indexed_release, sample_corpus, linker):
    from linker.corpus_data import iter_examples

    examples = list(iter_examples(str(sample_corpus), "validation"))[:60]
    queries = linker.encode_contexts([e.context for e in examples])
    hnsw = Linker(config(indexed_release, sample_corpus, crossencoder="no", index=IndexConfig(kind="hnsw")))
    assert hnsw.index.kind == "hnsw"
    exact_top = linker.index.search(queries, 1)[1][:, 0]
    hnsw_top = hnsw.index.search(queries, 1)[1][:, 0]
    assert np.mean(exact_top == hnsw_top) >= 0.95


def test_a_worker_reads_no_table_whole(indexed_release, sample_corpus, monkeypatch):
    """A worker (build_encodings=False) opens the prepared folder with memory maps: no Parquet table
    of the corpus (alias table, vocabulary, descriptions) is read, whatever its size."""
    import linker.catalogue

    def refuse(*args, **kwargs):
        raise AssertionError("a worker read a whole table")

    for name in ("read_parquet_folder", "read_alias_index", "read_catalogue"):
        monkeypatch.setattr(linker.catalogue, name, refuse)
    worker = Linker(config(indexed_release, sample_corpus), build_encodings=False)
    a, b = two_titles(worker)
    assert [m.entity for m in worker.link_text(f"{a} or {b}?")] == [a, b]


def test_stale_or_missing_encodings_are_not_built_on_workers(indexed_release, sample_corpus, tmp_path):
    with pytest.raises(FileNotFoundError, match="linker.cli index"):
        Linker(config(indexed_release, sample_corpus, encodings=str(tmp_path / "none")), build_encodings=False)


# --------------------------------------------------------------------------- AddBlinkLabels


def article_from(linker, row: int, page_id: int) -> LabeledArticle:
    title, text = linker.kb.title(row), linker.kb.text(row)
    first = text.index(title)
    return LabeledArticle(page_id, title, text, [Mention(first, first + len(title), title, title, "hyperlink")])


def test_add_blink_mentions_respects_threshold_and_existing_mentions(linker):
    article = article_from(linker, 0, 1)
    linked = linker.link_text(article.text)  # not blocked: includes the hyperlinked span
    assert any(m.start == article.mentions[0].start for m in linked)
    labeled, counts = add_blink_mentions(article, linked, threshold=0.0)
    assert (counts.added, counts.overlapping, counts.below_threshold) == (len(linked) - 1, 1, 0)
    assert article.mentions[0] in labeled.mentions
    spans = sorted((m.start, m.end) for m in labeled.mentions)
    assert all(e1 <= s2 for (_, e1), (s2, _) in zip(spans, spans[1:]))  # never overlapping
    strict = add_blink_mentions(article, linked, threshold=1.0)[1]
    assert strict.added == 0 and strict.below_threshold == len(linked)


def test_add_blink_labels_in_a_test_pipeline(indexed_release, sample_corpus, linker):
    cfg = config(indexed_release, sample_corpus, fast=True)
    fast = Linker(cfg)  # prepared here, as a job's launcher does: workers only open it
    articles = [article_from(linker, row, page_id=row + 1) for row in range(4)]
    expected_added = sum(len(fast.link_text(a.text, [(m.start, m.end) for m in a.mentions])) for a in articles)
    assert expected_added > 0

    def check_articles(out):
        assert sorted(a.page_id for a in out) == [1, 2, 3, 4]
        for a in out:
            assert [m for m in a.mentions if m.source == "hyperlink"] == [
                m for m in articles[a.page_id - 1].mentions]
            blink = [m for m in a.mentions if m.source == "blink"]
            for m in blink:
                assert a.text[m.start:m.end] == m.surface and linker.kb.row_of_title(m.entity) >= 0
            spans = [(m.start, m.end) for m in a.mentions]
            assert spans == sorted(spans) and all(e <= s for (_, e), (s, _) in zip(spans, spans[1:]))
        assert sum(m.source == "blink" for a in out for m in a.mentions) == expected_added

    def check_stats(stats):
        counts = dict(stats)
        assert counts["mentions/blink"] == expected_added
        assert counts["blink/articles"] == 4 and counts.get("blink/rejected_below_threshold", 0) == 0

    with BeamTestPipeline() as p:
        out = p | beam.Create(articles) | AddBlinkLabels(cfg, threshold=0.0)
        assert_that(out["articles"], check_articles)
        assert_that(tuple(out["stats"]) | SumStats(), check_stats, label="Stats")

    def check_none_added(counts):
        assert sum(counts) == 0, counts

    with BeamTestPipeline() as p:  # a threshold no softmax over 10+ candidates reaches: nothing added
        out = p | "Articles" >> beam.Create(articles) | "Strict" >> AddBlinkLabels(cfg, threshold=1.0)
        assert_that(out["articles"] | beam.Map(lambda a: sum(m.source == "blink" for m in a.mentions)), check_none_added)


# --------------------------------------------------------------------------- the Beam job


def test_link_mentions_job_end_to_end(indexed_release, sample_corpus, linker, tmp_path):
    from pipelines.corpus.tokenizer import load_tokenizer

    a, b = two_titles(linker)
    records = [{"id": 1, "question": f"Who lives in {a}?"},
               {"id": 2, "question": f"{b} and {a} are far apart.", "answer": "yes"},
               {"id": 3, "question": "nothing to link here"}]
    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in records) + "\nnot json\n{\"id\": 4}\n")
    out = tmp_path / "linked"
    cmd = [sys.executable, "-m", "pipelines.link_mentions", "--input", str(data), "--output", str(out),
           "--model", str(indexed_release), "--corpus", str(sample_corpus), "--text_field", "question",
           "--tokenizer", str(sample_corpus / "tokenizer"), "--index.kind", "hnsw", "--runner=Direct"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "3 records" in proc.stdout

    linked = [json.loads(line) for f in sorted(out.glob("linked-*-of-*.jsonl")) for line in f.read_text().splitlines()]
    by_id = {r["id"]: r for r in linked}
    assert sorted(by_id) == [1, 2, 3] and by_id[2]["answer"] == "yes"  # other fields kept
    tokenizer = load_tokenizer(str(sample_corpus / "tokenizer"))
    vocab_ids = set(linker.kb.entity_ids.tolist())
    assert [m["surface"] for m in by_id[2]["mentions"]] == [b, a] and by_id[3]["mentions"] == []
    for record in linked:
        text = record["question"]
        assert record["token_ids"] == tokenizer(text, add_special_tokens=False)["input_ids"]
        for m in record["mentions"]:
            assert set(m) == {"char_start", "char_end", "token_start", "token_end", "entity_id", "entity",
                              "source", "surface", "score"}
            assert text[m["char_start"]:m["char_end"]] == m["surface"] and m["source"] == "blink"
            assert m["entity_id"] in vocab_ids and 0 < m["score"] <= 1
            pieces = tokenizer.decode(record["token_ids"][m["token_start"]:m["token_end"]])
            assert pieces.strip() == m["surface"]
    dead = [json.loads(line) for f in out.glob("dead_letters-*.jsonl") for line in f.read_text().splitlines()]
    assert Counter(d["reason"].split(":")[0] for d in dead) == {"bad_json": 1, "no_text_field": 1}
    counters = json.loads((out / "stats.json").read_text())["counters"]
    assert counters["records/linked"] == 3 and counters["mentions/blink"] == 3
    assert (indexed_release / "entity_encodings").exists()


def test_blink_labels_flow_into_the_corpus_passages(indexed_release, sample_corpus, linker):
    """AddBlinkLabels between the labels and the windows, as pass 2 applies them (to each labelled page):
    the passages carry source="blink" mentions with token spans and this corpus's entity ids."""
    import pyarrow as pa

    from pipelines.transforms.blink import blink_linker_config
    from pipelines.transforms.passages import ChunkWindows, PassageOptions
    from schemas import PASSAGE_SCHEMA

    articles = [article_from(linker, row, page_id=row + 1) for row in range(3)]
    vocab = [(t, int(i)) for t, i in zip(kb_titles(linker), linker.kb.entity_ids)]
    options = PassageOptions(tokenizer=str(sample_corpus / "tokenizer"), window=128, overlap=10,
                             validation_fraction=0.0, split_salt="")

    def check_rows(keyed_rows):
        rows = [row for _split, _page, row in keyed_rows]
        pa.Table.from_pylist(rows, schema=PASSAGE_SCHEMA)  # the corpus schema accepts them
        blink = [m for row in rows for m in row["mentions"] if m["source"] == "blink"]
        assert blink and all(m["entity_id"] == dict(vocab)[m["entity"]] for m in blink)
        assert all(m["token_end"] > m["token_start"] for m in blink)

    with BeamTestPipeline() as p:
        labeled = (p | beam.Create(articles)
                   | AddBlinkLabels(blink_linker_config(str(indexed_release), str(sample_corpus)), threshold=0.0))
        chunks = {"articles": labeled["articles"], "vocab": p | "Vocab" >> beam.Create(vocab)} | ChunkWindows(options)
        assert_that(chunks["rows"], check_rows)


def test_cli_index_and_link(indexed_release, sample_corpus, linker, capsys):
    from linker.cli import main

    assert main(["index", "--model", str(indexed_release), "--corpus", str(sample_corpus)]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["entities"] == len(linker.catalogue) and summary["index"] == "exact"
    a, _ = two_titles(linker)
    assert main(["link", "--model", str(indexed_release), "--corpus", str(sample_corpus), "--crossencoder", "no",
                 "--text", f"Tell me about {a}."]) == 0
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [m["surface"] for m in record["mentions"]] == [a] and record["mentions"][0]["source"] == "blink"
    assert main(["link", "--model", str(indexed_release), "--corpus", str(sample_corpus), "--top_k", "0",
                 "--text", "x"]) == 2  # a bad option value is a usage error
