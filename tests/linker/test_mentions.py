"""Mention detection with spaCy's tokenizer and the alias table; the alias-prior candidate lists."""
from __future__ import annotations

import pytest

from linker.catalogue import alias_key, merge_alias_rows
from linker.mentions import ALIAS, DetectedSpan, DetectorConfig, MentionDetector, resolve_overlaps

pytest.importorskip("spacy")

ENTITY_IDS = {"Paris": 3, "Paris (band)": 4, "New York": 5, "New York City": 6, "York": 7, "The (band)": 8}
ROWS = [
    ("Paris", "Paris", 10, ["anchor", "title"]),
    ("paris", "Paris (band)", 2, ["anchor"]),
    ("Paris", "Paris (band)", 0, ["redirect"]),
    ("Paris", "Paris, Texas", 5, ["anchor"]),  # not in the vocabulary: cannot be linked
    ("New York", "New York", 5, ["anchor", "title"]),
    ("New  York City", "New York City", 4, ["anchor"]),
    ("York", "York", 3, ["anchor", "title"]),
    ("The", "The (band)", 1, ["anchor"]),
]


@pytest.fixture(scope="module")
def aliases():
    return merge_alias_rows(ROWS, ENTITY_IDS)


@pytest.fixture(scope="module")
def detector(aliases):
    return MentionDetector(aliases, DetectorConfig(language="en", spacy_model="none"))


def test_case_variants_merge_and_priors_come_from_summed_counts(aliases):
    paris = aliases.lookup("PARIS")
    assert [c.entity_id for c in paris] == [3, 4]  # most linked first; Paris, Texas is outside the vocabulary
    assert [round(c.prior, 4) for c in paris] == [round(10 / 12, 4), round(2 / 12, 4)]
    assert aliases.lookup("new york city")[0].entity_id == 6  # whitespace collapsed
    assert alias_key("  New\u00a0York ") == "new york"


def test_detects_aliases_longest_first_case_insensitively(detector):
    text = "Did the band play in new york city or in Paris?"
    spans = detector.detect(text)
    assert [(text[s.start:s.end], s.origin) for s in spans] == [("new york city", ALIAS), ("Paris", ALIAS)]
    assert [c.entity_id for c in spans[1].candidates] == [3, 4]  # the first-stage candidate list


def test_stopwords_short_aliases_and_blocked_spans_are_skipped(detector):
    text = "The York minster and York."
    spans = detector.detect(text, blocked=[(4, 8)])
    assert [(s.start, s.end) for s in spans] == [(21, 25)]  # "The" is a stopword; the first York is taken


def test_no_mention_inside_a_word_or_starting_with_punctuation(detector):
    assert detector.detect("Yorkshire (Parisian) -") == []
    assert detector.detect("") == [] and detector.detect("   ") == []


def test_overlaps_resolved_longest_then_ner_then_leftmost():
    spans = [DetectedSpan(0, 8, "New York", ALIAS), DetectedSpan(4, 13, "York City", "ner"),
             DetectedSpan(4, 8, "York", ALIAS), DetectedSpan(20, 25, "Paris", ALIAS)]
    assert [(s.start, s.end) for s in resolve_overlaps(spans)] == [(4, 13), (20, 25)]
    assert [(s.start, s.end) for s in resolve_overlaps(spans, blocked=[(10, 22)])] == [(0, 8)]


def test_detector_on_the_sample_corpus_aliases(sample_corpus):
    from linker.catalogue import read_alias_index, read_catalogue

    catalogue = read_catalogue(str(sample_corpus))
    aliases = read_alias_index(str(sample_corpus), catalogue.id_of_title())
    title = next(t for t in catalogue.titles if " " in t)  # a two-word name, e.g. "Halmar River"
    detector = MentionDetector(aliases, DetectorConfig(spacy_model="none"))
    text = f"where does the {title.lower()} flow?"
    spans = detector.detect(text)
    assert [text[s.start:s.end] for s in spans] == [title.lower()]
    assert catalogue.id_of_title()[title] in [c.entity_id for c in spans[0].candidates]


def tiny_ner_pipeline(folder) -> str:
    """A trained spaCy pipeline made here (no download): blank English + an NER overfitted on a few
    sentences, saved to disk, loaded by path like any installed pipeline."""
    import spacy
    from spacy.training import Example

    spacy.util.fix_random_seed(0)
    nlp = spacy.blank("en")
    ner = nlp.add_pipe("ner")
    data = [("I flew to Zorbania in 2015.", [(10, 18, "GPE"), (22, 26, "DATE")]),
            ("Zorbania is far from York.", [(0, 8, "GPE"), (21, 25, "GPE")]),
            ("We met Quentin Marlo in Zorbania.", [(7, 20, "PERSON"), (24, 32, "GPE")]),
            ("Quentin Marlo was born in 1990.", [(0, 13, "PERSON"), (26, 30, "DATE")])]
    for _, ents in data:
        for *_, label in ents:
            ner.add_label(label)
    examples = [Example.from_dict(nlp.make_doc(t), {"entities": e}) for t, e in data]
    optimizer = nlp.initialize(lambda: examples)
    for _ in range(60):
        nlp.update(examples, sgd=optimizer, drop=0.0)
    nlp.to_disk(folder)
    return str(folder)


def test_a_trained_pipeline_by_path_adds_ner_spans(aliases, tmp_path):
    detector = MentionDetector(aliases, DetectorConfig(spacy_model=tiny_ner_pipeline(tmp_path / "ner")))
    assert detector.has_ner
    text = "We met Quentin Marlo in Zorbania."
    spans = detector.detect(text)
    assert [(s.surface, s.origin) for s in spans] == [("Quentin Marlo", "ner"), ("Zorbania", "ner")]
    assert spans[0].candidates == ()  # not in the alias table: the bi-encoder alone proposes entities
    text = "I flew to Zorbania in 2015."
    assert [s.surface for s in detector.detect(text)] == ["Zorbania"]  # numeric types (DATE) are left out
    assert [s.surface for s in detector.detect("Zorbania is far from York.")] == ["Zorbania", "York"]
    york = [s for s in detector.detect("Zorbania is far from York.") if s.surface == "York"][0]
    assert york.candidates and york.candidates[0].entity_id == 7  # an NER span still gets its alias candidates


def test_an_installed_pipeline_adds_entity_spans(aliases):
    """Runs whenever a trained English pipeline package is installed (README: how to install one)."""
    from linker.mentions import find_installed_pipeline

    name = find_installed_pipeline("en")
    if name is None:
        pytest.skip("no trained English spaCy pipeline installed")
    detector = MentionDetector(aliases, DetectorConfig(spacy_model="auto"))
    assert detector.has_ner
    text = "Barack Obama visited Paris in 2015."
    spans = detector.detect(text)
    assert ("Barack Obama", "ner") in [(s.surface, s.origin) for s in spans]
    assert "2015" not in [s.surface for s in spans]  # numeric types are left out
    assert [c.entity_id for c in next(s for s in spans if s.surface == "Paris").candidates] == [3, 4]
