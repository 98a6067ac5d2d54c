"""Article texts and links of the shared real dump excerpts, extracted once per test session.

Pages are read with ``benchmarks/bench_extract.py``'s small reader (ns-0,
non-redirect pages; a truncated file yields what parsed) and rendered with
``extract_article``. Used by the tokenizer and label-matcher equivalence tests.
"""
from __future__ import annotations

import sys
from collections import Counter, defaultdict
from functools import lru_cache
from pathlib import Path

from pipelines.corpus.labels import AliasCandidate
from pipelines.records import LinkMention, Mention
from pipelines.wikitext import ExtractionError, extract_article
from tests.conftest import WIKIDUMPS, distinct_dumps

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from bench_extract import read_articles  # noqa: E402

LabellingInput = tuple[str, str, list[Mention], list[AliasCandidate]]

ALL_DUMPS = tuple(distinct_dumps())  # a multistream twin's pages once


@lru_cache(maxsize=None)
def dump_articles(name: str) -> tuple[tuple[str, str, tuple[LinkMention, ...]], ...]:
    """(title, text, links) of every article of the shared dump ``name`` that extracts."""
    site, pages = read_articles(WIKIDUMPS / name)
    out = []
    for title, wikitext in pages:
        try:
            extraction = extract_article(wikitext, site, title=title)
        except ExtractionError:
            continue
        out.append((title, extraction.text, tuple(extraction.links)))
    return tuple(out)


def labelling_inputs(names: tuple[str, ...]) -> list[LabellingInput]:
    """(title, text, hyperlinks, candidates) of every distinct article of the dumps ``names``.

    Candidates are what the job's join brings a page: for each entity linked
    in it, every anchor text used for that entity anywhere in these dumps
    (with its count and prior), and the page's own title entity with its
    anchors and its title.
    """
    # Each text once (two dumps may hold the same article).
    articles = list({(t, x): (t, x, links) for name in names for t, x, links in dump_articles(name)}.values())
    pair_counts = Counter((link.surface.strip(), link.target) for _t, _x, links in articles for link in links)
    alias_totals: Counter = Counter()
    by_entity = defaultdict(list)
    for (alias, entity), count in pair_counts.items():
        alias_totals[alias] += count
        by_entity[entity].append((alias, count))

    def aliases_of(entity: str, origin: str) -> list[AliasCandidate]:
        return [AliasCandidate(a, entity, c, c / alias_totals[a], origin, ("anchor",)) for a, c in by_entity[entity]]

    pages = []
    for title, text, links in articles:
        cands = [c for entity in sorted({link.target for link in links}) for c in aliases_of(entity, "linked")]
        cands += aliases_of(title, "title") + [AliasCandidate(title, title, 0, 0.0, "title", ("title",))]
        mentions = [Mention(link.start, link.end, link.surface, link.target, "hyperlink") for link in links]
        pages.append((title, text, mentions, cands))
    return pages
