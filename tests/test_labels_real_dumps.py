"""Label coverage on real dumps, in-process: hide repeated links as benchmarks/bench_labels.py
does, label the page from its remaining links and its title, and score the hidden spans.

The Beam job adds the corpus-wide alias table (more aliases, more ambiguity); the benchmark
measures that. Here the labeller alone runs on real Ukrainian and English text in seconds.
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from pipelines.corpus.labels import (
    ALIAS_FIRST_LETTER_CASE,
    ALIAS_PLURAL_EN,
    SAME_PAGE_NUMBER,
    VARIANT_SOURCES,
    AliasCandidate,
    LabelConfig,
    label_missing_mentions,
)
from pipelines.records import Mention
from pipelines.wikitext import extract_article, normalize_title
from tests.conftest import dump, needs_shared

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from bench_labels import Wiki, _hidden_spans, hide_links  # noqa: E402

MAX_ARTICLES = 60


def page_links_and_candidates(wiki, title: str, links) -> tuple[list, list]:
    """The page's resolvable links as hyperlink mentions, and the label candidates they and the
    page's own title give (as the job's label join would)."""
    hyperlinks, candidates = [], [AliasCandidate(title, title, 0, 0.0, "title", ("title",))]
    for m in links:
        entity = wiki.entity(m.target)
        if entity is not None:
            hyperlinks.append(Mention(m.start, m.end, m.surface, entity, "hyperlink"))
            candidates.append(AliasCandidate(m.surface, entity, 1, 1.0, "linked", ("anchor",)))
    return hyperlinks, candidates


def hidden_and_labelled(path: str, config: LabelConfig) -> list[tuple[dict, Mention | None]]:
    """(hidden span, the label at exactly that span or None) for the first articles of a dump."""
    wiki = Wiki(path)
    results = []
    articles = 0
    for page in wiki.pages:
        if page.ns != 0 or not page.text:
            continue
        title = normalize_title(page.title, wiki.site)
        if title in wiki.redirects or title in wiki.disambiguation:
            continue
        articles += 1
        if articles > MAX_ARTICLES:
            break
        modified = hide_links(wiki, page, title)
        if modified == page.text:
            continue
        before = extract_article(page.text, wiki.site, title=title)
        after = extract_article(modified, wiki.site, title=title)
        if before.text != after.text:
            continue
        spans = _hidden_spans(wiki, title, before, after.links)
        hyperlinks, candidates = page_links_and_candidates(wiki, title, after.links)
        labels = {(m.start, m.end): m for m in label_missing_mentions(after.text, hyperlinks, candidates, config)}
        results.extend((s, labels.get((s["start"], s["end"]))) for s in spans)
    return results


def scores(results) -> dict:
    recoverable = [(s, m) for s, m in results if s["surface"] in s["anchors"] or s["own"]]
    labelled = [(s, m) for s, m in results if m is not None]
    return {
        "recoverable": len(recoverable),
        "of_recoverable": sum(m is not None and m.entity == s["entity"] for s, m in recoverable) / len(recoverable),
        "precision": sum(m.entity == s["entity"] for s, m in labelled) / len(labelled),
    }


@needs_shared
@pytest.mark.parametrize("name", ["ukwiki-2023-first100k-lines-truncated.xml.xz", "simplewiki-2019-7pages.xml.bz2"])
def test_most_recoverable_hidden_links_come_back_precisely(name):
    result = scores(hidden_and_labelled(dump(name), LabelConfig.for_language(name[:2] if name.startswith("uk") else "en")))
    assert result["recoverable"] >= 100
    assert result["of_recoverable"] >= 0.9, result
    assert result["precision"] >= 0.95, result


@needs_shared
def test_numbers_the_page_links_are_labelled_only_by_their_own_rule():
    """On ukwiki, years are linked ("[[1880]] року"): rule (c) labels their repeats; off, none are."""
    path = dump("ukwiki-2023-first100k-lines-truncated.xml.xz")
    config = LabelConfig.for_language("uk")
    numbers = [(s, m) for s, m in hidden_and_labelled(path, config) if s["surface"].isdigit()]
    assert len(numbers) >= 30
    right = [m for s, m in numbers if m is not None and m.entity == s["entity"]]
    assert len(right) >= 0.8 * len(numbers) and {m.source for m in right} == {SAME_PAGE_NUMBER}
    off = hidden_and_labelled(path, dataclasses.replace(config, label_numbers=False))
    assert not [m for s, m in off if s["surface"].isdigit() and m is not None]


def _all_labels(path: str, config: LabelConfig) -> list[list]:
    """Every label of the first articles of a dump (links hidden as above), page by page."""
    wiki = Wiki(path)
    pages = []
    for page in wiki.pages:
        if page.ns != 0 or not page.text or len(pages) >= MAX_ARTICLES:
            continue
        title = normalize_title(page.title, wiki.site)
        if title in wiki.redirects or title in wiki.disambiguation:
            continue
        after = extract_article(hide_links(wiki, page, title), wiki.site, title=title)
        hyperlinks, candidates = page_links_and_candidates(wiki, title, after.links)
        pages.append(label_missing_mentions(after.text, hyperlinks, candidates, config))
    return pages


@needs_shared
@pytest.mark.parametrize("name, language", [("simplewiki-2019-7pages.xml.bz2", "simple"),
                                            ("ukwiki-2023-first100k-lines-truncated.xml.xz", "uk")])
def test_variant_rules_only_add_labels_and_recover_more_hidden_links(name, language):
    """The exact rules' labels are identical with the variant rules on; on hidden links the
    variants add correct labels at >= 0.95 precision (English plural/possessive only on English)."""
    on = LabelConfig.for_language(language)
    off = dataclasses.replace(on, label_case_variants=False, label_plural_variants=False,
                              label_possessive_variants=False)
    with_variants, without = _all_labels(dump(name), on), _all_labels(dump(name), off)
    assert [[m for m in page if m.source not in VARIANT_SOURCES] for page in with_variants] == without
    sources = {m.source for page in with_variants for m in page} & set(VARIANT_SOURCES)
    assert ALIAS_FIRST_LETTER_CASE in sources
    assert (ALIAS_PLURAL_EN in sources) == (language == "simple")
    results_on, results_off = hidden_and_labelled(dump(name), on), hidden_and_labelled(dump(name), off)
    variant_labels = [(s, m) for s, m in results_on if m is not None and m.source in VARIANT_SOURCES]
    assert len(variant_labels) >= 5
    assert sum(m.entity == s["entity"] for s, m in variant_labels) >= 0.95 * len(variant_labels)
    right = [sum(m is not None and m.entity == s["entity"] for s, m in r) for r in (results_on, results_off)]
    assert right[0] >= right[1] + 5
