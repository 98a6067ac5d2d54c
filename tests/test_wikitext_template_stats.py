"""Template calls in stats.json: totals by outcome, registry names exactly, dropped
names bounded (top N plus "(other)"), and the summary's top dropped names."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to

from pipelines.transforms.parse import TopDroppedTemplates, extraction_counter
from pipelines.wiki_mentions import print_summary, template_summary


def test_extraction_counts_become_template_counters():
    assert extraction_counter("templates_rendered") == "templates/rendered"
    assert extraction_counter("templates_dropped") == "templates/dropped"
    assert extraction_counter("links_in_template") == "links_dropped/links_in_template"


def test_top_dropped_templates_keeps_n_names_and_an_other_bucket():
    names = [("Infobox", 5), ("Cite web", 3), ("Infobox", 2), ("Navbox", 3), ("Rare", 1), ("Odd", 1)]
    with BeamTestPipeline() as p:
        stats = p | beam.Create(names) | TopDroppedTemplates(top=2)
        # Infobox 7; Navbox and Cite web tie at 3: the name breaks the tie, every run alike.
        assert_that(stats, equal_to([("templates_dropped/Infobox", 7), ("templates_dropped/Navbox", 3),
                                     ("templates_dropped/(other)", 5)]))


def test_top_dropped_templates_of_nothing_is_nothing():
    with BeamTestPipeline() as p:
        stats = p | beam.Create([]) | TopDroppedTemplates(top=2)
        assert_that(stats, equal_to([]))


def test_summary_lines_show_outcomes_and_top_dropped_names():
    counters = {"templates/rendered": 10, "templates/omitted": 4, "templates/dropped": 9,
                "templates_dropped/Infobox": 5, "templates_dropped/Cite book": 3,
                "templates_dropped/(other)": 1}
    assert template_summary(counters) == [
        "  templates: rendered 10, omitted 4, dropped 9",
        "  top dropped templates: Infobox 5, Cite book 3"]
    assert template_summary({}) == []


@pytest.mark.slow
@pytest.mark.needs_shared
def test_job_stats_count_templates_like_the_extraction(enwiki206_corpus: Path, capsys):
    from pipelines.wikitext import is_disambiguation
    from tests.test_wikitext_real_dumps import read_dump, successes

    site = read_dump("enwiki-2016-206pages-articles1.xml.bz2")[0]
    counters = json.loads((enwiki206_corpus / "stats.json").read_text())["counters"]
    expected: Counter = Counter()
    outcomes: Counter = Counter()
    for _title, wikitext, result in successes("enwiki-2016-206pages-articles1.xml.bz2"):
        if is_disambiguation(wikitext, site):  # the job does not extract those
            continue
        expected.update(result.template_names)
        outcomes.update({k: v for k, v in result.counts.items() if k.startswith("templates_")})
    for outcome in ("rendered", "omitted", "dropped"):
        assert counters[f"templates/{outcome}"] == outcomes[f"templates_{outcome}"] > 0
    for key, calls in expected.items():
        outcome, name = key.split("/", 1)
        if outcome != "dropped":  # registry names: exact
            assert counters[f"templates_{outcome}/{name}"] == calls, key
    dropped = {k: v for k, v in counters.items() if k.startswith("templates_dropped/")}
    assert sum(dropped.values()) == counters["templates/dropped"]
    assert dropped["templates_dropped/Cite book"] == expected["dropped/Cite book"]
    assert counters["templates_rendered/Convert"] > 100
    print_summary(str(enwiki206_corpus), 1.0)
    summary = capsys.readouterr().out
    assert "top dropped templates: Cite book" in summary
