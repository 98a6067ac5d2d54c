"""The corpus job on dumps that break the usual assumptions, end to end (DirectRunner).

* Links to main-namespace pages that redirect out of the main namespace
  (a mistyped category link) are dropped and counted, never entities, under
  any ``--keep_red_links``.
* Duplicate page ids and duplicate titles give byte-identical output on one
  worker and on two worker processes, with a documented tie-break.
"""
from __future__ import annotations

import json
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

import pyarrow.parquet as pq
import pytest

from tests.conftest import run_job_here

pytestmark = pytest.mark.slow

SITEINFO = """  <siteinfo>
    <sitename>Wikipedia</sitename><dbname>enwiki</dbname><base>https://en.invalid/wiki/Main</base>
    <generator>test</generator><case>first-letter</case>
    <namespaces>
      <namespace key="0" case="first-letter" /><namespace key="10" case="first-letter">Template</namespace>
      <namespace key="14" case="first-letter">Category</namespace>
    </namespaces>
  </siteinfo>
"""


def _page(page_id: int, title: str, text: str, revision: int, redirect: str | None = None) -> str:
    red = f"<redirect title={quoteattr(redirect)} />" if redirect else ""
    return (f"<page><title>{escape(title)}</title><ns>0</ns><id>{page_id}</id>{red}<revision><id>{revision}</id>"
            f"<text xml:space=\"preserve\">{escape(text)}</text></revision></page>\n")


def write_broken_dump(path: Path) -> Path:
    filler = " ".join(f"Sentence {i} talks about [[Beta]] and [[Gamma]] and Delta." for i in range(40))
    pages = [
        _page(1, "Alpha", "'''Alpha''' links [[Beta]], [[Kategorie-typo:Things|things]] and [[Typo two]]. "
                          "Alpha again. " + filler, 10),
        _page(2, "Beta", "'''Beta''' is a letter. It follows [[Alpha]]. Beta is second. " + filler, 20),
        _page(6, "Kategorie-typo:Things", "#REDIRECT [[Category:Things]]", 60, redirect="Category:Things"),
        _page(7, "Typo two", "#REDIRECT [[Kategorie-typo:Things]]", 70, redirect="Kategorie-typo:Things"),
        # Page id 3 twice: the later revision is kept, wherever it comes in the file.
        _page(3, "Gamma", "'''Gamma''' NEW revision text. It cites [[Alpha]]. " + filler, 31),
        _page(4, "Delta", "'''Delta''' first copy, of page 4. [[Beta]]. " + filler, 40),
        _page(3, "Gamma", "'''Gamma''' OLD revision text. It cites [[Beta]]. " + filler, 30),
        # Title Delta twice (ids 4 and 5): both are pages; the description is page 4's.
        _page(5, "Delta", "'''Delta''' second copy, of page 5. [[Alpha]]. " + filler, 50),
    ]
    for i in range(8, 40):  # more pages, so the work splits into several bundles
        pages.append(_page(i, f"Filler {i}", f"Filler {i} mentions [[Alpha]], [[Delta]] and [[Gamma]]. " + filler, i * 10))
    path.write_text('<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.11/" version="0.11">\n'
                    + SITEINFO + "".join(pages) + "</mediawiki>\n", encoding="utf-8")
    return path


def _files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*.parquet"))}


def test_redirects_out_of_the_main_namespace_are_not_entities(tmp_path):
    dump = write_broken_dump(tmp_path / "broken.xml")
    for keep in ("true", "false"):
        out = tmp_path / f"out-{keep}"
        run_job_here(str(dump), out, "--keep_red_links", keep)
        counters = json.loads((out / "stats.json").read_text())["counters"]
        # [[Kategorie-typo:Things]] and [[Typo two]] (a redirect chain into it).
        assert counters["links_dropped/other_namespace_redirect"] == 2
        assert counters["redirects_out_of_main_namespace"] == 1
        vocab = set(pq.read_table(out / "entity_vocab" / "entity_vocab.parquet").column("entity").to_pylist())
        aliases = pq.read_table(sorted((out / "alias_table").glob("*.parquet"))[0]).to_pylist()
        assert {"Kategorie-typo:Things", "Typo two", "Category:Things"}.isdisjoint(vocab)
        assert {"Kategorie-typo:Things", "Category:Things"}.isdisjoint({a["entity"] for a in aliases})
        assert {"Alpha", "Beta", "Gamma", "Delta"} <= vocab


def test_duplicate_page_ids_and_titles_are_deterministic_on_any_parallelism(tmp_path):
    dump = write_broken_dump(tmp_path / "broken.xml")
    one, two = tmp_path / "one", tmp_path / "two"
    run_job_here(str(dump), one, "--validation_fraction", "0.2", "--direct_num_workers", "1")
    run_job_here(str(dump), two, "--validation_fraction", "0.2",
                 "--direct_running_mode", "multi_processing", "--direct_num_workers", "2")
    assert _files(one) == _files(two)
    counters = json.loads((one / "stats.json").read_text())["counters"]
    assert counters["duplicate_page_ids"] == 1
    passages = [row for f in sorted((one / "passages").glob("*.parquet")) for row in pq.read_table(f).to_pylist()]
    gamma = [p for p in passages if p["page_id"] == 3]
    assert gamma and {p["title"] for p in gamma} == {"Gamma"}
    # The kept copy of page 3 is the latest revision: it links Alpha (the old one linked Beta).
    gamma_links = {m["entity"] for p in gamma for m in p["mentions"] if m["source"] == "hyperlink"}
    assert "Alpha" in gamma_links
    assert len({p["page_id"] for p in passages if p["title"] == "Delta"}) == 2  # both Delta pages are kept
    descriptions = [r for f in sorted((one / "entity_descriptions").glob("*.parquet")) for r in pq.read_table(f).to_pylist()]
    delta = [r for r in descriptions if r["entity"] == "Delta"]
    assert len(delta) == 1 and "first copy, of page 4" in delta[0]["description"]
