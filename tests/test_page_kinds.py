"""classify_page: the page-kind rule, as a pure function (ClassifyPagesFn only maps it to outputs)."""
from __future__ import annotations

import pytest

from pipelines.corpus.page_kinds import (
    BAD_PAGE,
    EMPTY_PAGE,
    INVALID_TITLE,
    NOT_IN_MAIN_NAMESPACE,
    WIKITEXT_TOO_LONG,
    PageClass,
    classify_page,
)
from pipelines.corpus.resolution import ARTICLE, DISAMBIGUATION, OTHER_NAMESPACE_REDIRECT, REDIRECT
from pipelines.records import Namespace, RawPage, SiteInfo
from pipelines.wikitext import DisambiguationConfig

EN = SiteInfo(dbname="enwiki", namespaces=(Namespace(0, ""), Namespace(10, "Template"), Namespace(14, "Category")))


def classify(title, text="Some text.", ns=0, redirect=None, limit=1000):
    return classify_page(RawPage(1, ns, title, text, redirect), EN, DisambiguationConfig(), limit)


@pytest.mark.parametrize("page, expected", [
    (dict(title="paris"), PageClass(ARTICLE, "Paris")),  # first-letter case
    (dict(title="Category:Cities", ns=14), PageClass(NOT_IN_MAIN_NAMESPACE)),
    (dict(title="NYC", text="#REDIRECT [[New York City]]"), PageClass(REDIRECT, "NYC", "New York City")),
    # The <redirect title=..> element wins over the text.
    (dict(title="NYC", text="#REDIRECT [[Elsewhere]]", redirect="New York City"),
     PageClass(REDIRECT, "NYC", "New York City")),
    # Old exports have no <redirect> element: the text's target gets the same namespace rule.
    (dict(title="Cats list", text="#REDIRECT [[Category:Cats]]"), PageClass(OTHER_NAMESPACE_REDIRECT, "Cats list")),
    (dict(title="Cats list", text="", redirect="Category:Cats"), PageClass(OTHER_NAMESPACE_REDIRECT, "Cats list")),
    (dict(title="Mercury", text="'''Mercury''' may refer to:\n* [[Mercury (planet)]]\n{{disambiguation}}"),
     PageClass(DISAMBIGUATION, "Mercury")),
    (dict(title="Blank", text="  \n"), PageClass(BAD_PAGE, "Blank", reason=EMPTY_PAGE)),
    (dict(title="Huge", text="x" * 1001), PageClass(BAD_PAGE, "Huge", reason=WIKITEXT_TOO_LONG, detail="1001 chars")),
    (dict(title=" "), PageClass(BAD_PAGE, reason=INVALID_TITLE, detail=" ")),
])
def test_classify_page(page, expected):
    assert classify(**page) == expected
