"""Article texts and links of the shared real dump excerpts, extracted once per test session.

Pages are read with ``benchmarks/bench_extract.py``'s small reader (ns-0,
non-redirect pages; a truncated file yields what parsed) and rendered with
``extract_article``. Used by the tokenizer and label-matcher equivalence tests.
"""
from __future__ import annotations

import sys
from functools import lru_cache
from pathlib import Path

from pipelines.records import LinkMention
from pipelines.wikitext import ExtractionError, extract_article
from tests.conftest import WIKIDUMPS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from bench_extract import read_articles  # noqa: E402

ALL_DUMPS = tuple(sorted(p.name for p in WIKIDUMPS.glob("*.xml*") if "-index" not in p.name))


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
