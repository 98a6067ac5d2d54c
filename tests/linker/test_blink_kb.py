"""BLINK's KB layout (entity.jsonl + .t7) mapped onto a corpus vocabulary by title, through redirects;
unmapped entities counted, dropped or kept; BLINK labels in the corpus job's passages."""
from __future__ import annotations

import json

import apache_beam as beam
import pytest
import torch
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that

from linker.catalogue import read_catalogue
from linker.link import Linker, LinkerConfig
from linker.mentions import DetectedSpan

pytestmark = pytest.mark.slow

UNMAPPED = ["Atlantis", "Nowhere Land"]


@pytest.fixture(scope="module")
def blink_kb(tmp_path_factory, sample_corpus, fake_release) -> dict:
    """A KB in BLINK's release format for the sample corpus's entities: most rows under their exact
    title, some under a non-normalised title (underscores, lower-case first letter), some under a
    redirect's title, two entities the corpus does not have; encoded by the release's bi-encoder."""
    from linker.biencoder import encode_in_batches, load_biencoder

    catalogue = read_catalogue(str(sample_corpus))
    redirects = {}
    import pyarrow.dataset as ds

    for row in ds.dataset(sample_corpus / "alias_table").to_table().to_pylist():
        if "redirect" in row["sources"] and row["alias"] not in catalogue.id_of_title():
            redirects.setdefault(row["entity"], row["alias"])
    titles, texts, expected = [], [], []
    for i, (title, text) in enumerate(zip(catalogue.titles, catalogue.descriptions)):
        if title in redirects and len([t for t in expected if t[1] == "redirect"]) < 3:
            titles.append(redirects[title]), expected.append((title, "redirect"))
        elif " " in title and len([t for t in expected if t[1] == "normalised_title"]) < 3:
            titles.append(title[0].lower() + title[1:].replace(" ", "_")), expected.append((title, "normalised_title"))
        else:
            titles.append(title), expected.append((title, "title"))
        texts.append(text)
    titles += UNMAPPED
    texts += ["A sunken island of legend.", "A place that is not there."]
    expected += [(None, "unmapped")] * 2
    folder = tmp_path_factory.mktemp("blink_release_kb")
    with open(folder / "entity.jsonl", "w", encoding="utf-8") as fh:
        for row, (title, text) in enumerate(zip(titles, texts)):
            fh.write(json.dumps({"text": " " + text, "idx": f"https://en.wikipedia.org/wiki?curid={7000 + row}",
                                 "title": title, "entity": title}) + "\n")
    bi = load_biencoder(str(fake_release))
    encodings = encode_in_batches(bi.model.encode_candidate, bi.inputs.candidates(titles, texts), 16, 0)
    torch.save(torch.from_numpy(encodings), folder / "all_entities_large.t7", _use_new_zipfile_serialization=False)
    return {"dir": folder, "titles": titles, "expected": expected}


def linker_for(fake_release, sample_corpus, blink_kb, tmp_path, **kw) -> Linker:
    return Linker(LinkerConfig(model=str(fake_release), corpus=str(sample_corpus), kb=f"blink:{blink_kb['dir']}",
                               encodings=str(tmp_path), fast=True, **kw))


def test_blink_entities_map_onto_the_corpus_by_title_and_redirect(fake_release, sample_corpus, blink_kb, tmp_path):
    linker = linker_for(fake_release, sample_corpus, blink_kb, tmp_path / "prepared")
    kb = linker.kb
    how = [kind for _, kind in blink_kb["expected"]]
    mapping = kb.meta["mapping"]
    assert mapping["unmapped"] == 2 and mapping["mapped"] == len(kb) - 2
    for kind in ("title", "normalised_title", "redirect"):
        assert mapping[kind] == how.count(kind) > 0, kind
    ids = read_catalogue(str(sample_corpus)).id_of_title()
    for row, (title, kind) in enumerate(blink_kb["expected"]):
        if kind == "unmapped":
            assert kb.entity_ids[row] == -1 and kb.entity_title(row) == blink_kb["titles"][row]
        else:
            assert kb.entity_ids[row] == ids[title] and kb.entity_title(row) == title  # the corpus's title
    assert kb.meta["encodings"]["format"] == "legacy"  # the .t7 is mapped in place, as BLINK's release is written


def test_unmapped_entities_are_dropped_or_kept_on_request(fake_release, sample_corpus, blink_kb, tmp_path):
    text = "They sailed to Atlantis and back."
    span = (text.index("Atlantis"), text.index("Atlantis") + len("Atlantis"))
    everything = len(blink_kb["titles"])  # retrieve every row: the unmapped ones are among them
    dropped = linker_for(fake_release, sample_corpus, blink_kb, tmp_path / "a", top_k=everything)
    result = dropped.rank_contexts([dropped.biencoder.inputs.context_of_span(text, *span)],
                                   [dropped.span_of(text, span)])[0]
    assert (result.candidates.entity_ids >= 0).all() and len(result.retrieved_rows) == everything - 2
    kept = linker_for(fake_release, sample_corpus, blink_kb, tmp_path / "b", top_k=everything, kb_unmapped="keep")
    result = kept.rank_contexts([kept.biencoder.inputs.context_of_span(text, *span)], [kept.span_of(text, span)])[0]
    unmapped_rows = {len(blink_kb["titles"]) - 2, len(blink_kb["titles"]) - 1}
    assert unmapped_rows <= set(result.candidates.rows.tolist())
    linked = kept.linked_mention(result)
    assert linked.wikipedia_id == 7000 + linked.kb_row


def test_blink_kb_labels_reach_the_passages_with_corpus_ids(fake_release, sample_corpus, blink_kb, tmp_path):
    import pyarrow as pa

    from linker.catalogue import read_catalogue
    from pipelines.records import LabeledArticle, Mention
    from pipelines.transforms.blink import AddBlinkLabels, blink_linker_config
    from pipelines.transforms.passages import ChunkWindows, PassageOptions
    from schemas import PASSAGE_SCHEMA

    catalogue = read_catalogue(str(sample_corpus))
    config = blink_linker_config(str(fake_release), str(sample_corpus), "en", kb=f"blink:{blink_kb['dir']}",
                                 threshold=0.0, fast=True, encodings=str(tmp_path / "prepared"))
    Linker(config)  # prepared once, as the corpus job's launcher does
    articles = []
    for row in range(3):
        title, text = catalogue.titles[row], catalogue.descriptions[row]
        first = text.index(title)
        articles.append(LabeledArticle(row + 1, title, text, [Mention(first, first + len(title), title, title, "hyperlink")]))
    vocab = list(catalogue.id_of_title().items())
    options = PassageOptions(tokenizer=str(sample_corpus / "tokenizer"), window=128, overlap=10,
                             validation_fraction=0.0, split_salt="", num_shards=1)

    def check_rows(keyed_rows):
        rows = [row for _, row in keyed_rows]
        pa.Table.from_pylist(rows, schema=PASSAGE_SCHEMA)
        blink = [m for row in rows for m in row["mentions"] if m["source"] == "blink"]
        assert blink and all(m["entity_id"] == dict(vocab)[m["entity"]] for m in blink)
        assert not any(m["entity"] in UNMAPPED for m in blink)

    with BeamTestPipeline() as p:
        labeled = p | beam.Create(articles) | AddBlinkLabels(config)
        chunks = {"articles": labeled["articles"], "vocab": p | "Vocab" >> beam.Create(vocab)} | ChunkWindows(options)
        assert_that(chunks["rows"], check_rows)


def test_mention_records_find_their_gold_row_by_curid_or_title(fake_release, sample_corpus, blink_kb, tmp_path):
    """A labelled BLINK mention record finds its gold row by curid (BLINK's label_id) or by title."""
    from linker.blink_io import gold_row

    linker = linker_for(fake_release, sample_corpus, blink_kb, tmp_path / "c")
    assert gold_row({"label_id": 7003}, linker.kb) == 3
    assert gold_row({"label_id": "7004"}, linker.kb) == 4
    assert gold_row({"label_title": "Atlantis"}, linker.kb) == len(blink_kb["titles"]) - 2
    assert gold_row({"label_id": 1}, linker.kb) == -1 and gold_row({}, linker.kb) is None
    span = DetectedSpan(0, 5, "x", "given")
    assert linker.rank_contexts([linker.biencoder.inputs.context_of_span("x", 0, 1)], [span])[0].best() is not None
