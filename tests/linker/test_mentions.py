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


def test_trained_ner_pipeline_adds_entity_spans(aliases):
    import spacy

    if not spacy.util.is_package("en_core_web_sm"):
        pytest.skip("no trained English spaCy pipeline installed")
    detector = MentionDetector(aliases, DetectorConfig(spacy_model="auto"))
    assert detector.has_ner
    text = "Barack Obama visited Paris in 2015."
    spans = detector.detect(text)
    assert ("Barack Obama", "ner") in [(s.surface, s.origin) for s in spans]
    assert "2015" not in [s.surface for s in spans]  # numeric types are left out
