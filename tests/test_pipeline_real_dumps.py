"""The corpus job on the other real excerpts: damaged files, another language,
plain XML, multistream parallel reads and determinism across workers."""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.conftest import dump, needs_shared, run_job, run_job_here
from tests.corpus_checks import check_passage_contract, manifest, raw_counts
from tests.corpus_equality import differences
from tests.test_markup_residue import assert_no_markup

pytestmark = [pytest.mark.slow, needs_shared]


def _dead_letters(out: Path) -> list[dict]:
    return pq.read_table(out / "dead_letters" / "dead_letters.parquet").to_pylist()


def test_multistream_parallel_read_on_two_workers_is_byte_identical(enwiki206_corpus: Path, tmp_path: Path):
    """Byte ranges of the multistream file, read by 2 DirectRunner processes, give the same files, byte for
    byte, as 1 worker, and the same rows as one sequential read of the plain file (whose files are fewer:
    the two-pass job writes one passages file per read range and split)."""
    args = ("--validation_fraction", "0.05", "--keep_red_links", "true", "--read_range_mb", "1")
    multistream = dump("enwiki-2016-206pages-articles1-multistream.xml.bz2")
    out, one = tmp_path / "mp", tmp_path / "one"
    run_job(multistream, out, *args, "--direct_num_workers", "2", "--direct_running_mode", "multi_processing")
    run_job_here(multistream, one, *args, "--direct_num_workers", "1")
    parallel, single, sequential = manifest(out), manifest(one), manifest(enwiki206_corpus)
    assert parallel["job"]["read_ranges"] >= 2
    assert sequential["job"]["read_ranges"] == 1
    assert {f["path"]: f["sha256"] for f in parallel["files"]} == {f["path"]: f["sha256"] for f in single["files"]}
    assert parallel["counters"] == single["counters"]
    assert differences(enwiki206_corpus, out) == {}
    assert_no_markup(out, "enwiki-2016-206pages-articles1-multistream.xml.bz2")


def test_truncated_ukrainian_dump_completes_with_a_dead_letter(shared_dump_corpus):
    name = "ukwiki-2023-first100k-lines-truncated.xml.xz"
    out = shared_dump_corpus(name)
    m = manifest(out)
    counters = m["counters"]
    assert m["site"]["dbname"] == "ukwiki" and m["site"]["language"] == "uk"
    assert "uk" in m["job"]["effective_labels"]["stopwords"]  # the language's stopwords were added
    reasons = {(d["stage"], d["reason"]) for d in _dead_letters(out)}
    assert ("read", "truncated_xml") in reasons or ("read", "truncated_compressed") in reasons
    assert counters["dead_letters/read/truncated_xml"] + counters.get("dead_letters/read/truncated_compressed", 0) == 1
    assert counters["articles"] > 100
    assert counters["mentions/hyperlink"] > 1000 and counters["mentions/same_page_alias"] > 0
    totals = check_passage_contract(out)
    assert totals["passages/train"] > 500
    assert "dead letters" in shared_dump_corpus.stdout[name]
    assert_no_markup(out, name)


def test_dump_without_siteinfo_is_counted_and_still_processed(shared_dump_corpus):
    path = dump("enwiki-5pages-tables-no-siteinfo.xml.bz2")
    raw = raw_counts(path)
    out = shared_dump_corpus("enwiki-5pages-tables-no-siteinfo.xml.bz2")
    m = manifest(out)
    assert m["counters"]["siteinfo_missing"] == 1
    assert m["site"]["siteinfo_in_dump"] is False
    assert {"stage": "read", "reason": "missing_siteinfo"}.items() <= _dead_letters(out)[0].items()
    assert m["counters"]["articles"] == len(raw.wikitext)
    check_passage_contract(out)
    assert_no_markup(out, "enwiki-5pages-tables-no-siteinfo.xml.bz2")


@pytest.mark.parametrize("name", ["enwiki-2019-11pages-partial.xml", "simplewiki-2019-7pages.xml.bz2",
                                  "enwiki-2019-196pages-namespaces.xml.bz2"])
def test_other_excerpts_counts_match_raw_xml(name: str, shared_dump_corpus):
    path = dump(name)
    raw = raw_counts(path)
    out = shared_dump_corpus(name)
    counters = manifest(out)["counters"]
    assert counters["pages_read"] == raw.pages
    assert counters["redirects"] == raw.redirects
    assert counters.get("pages_by_namespace/0", 0) == raw.main_namespace
    assert counters.get("articles", 0) + counters.get("disambiguation_pages", 0) == raw.main_namespace - raw.redirects
    assert counters.get("disambiguation_pages", 0) == raw.disambiguation
    check_passage_contract(out)
    stats = json.loads((out / "stats.json").read_text())
    assert stats["counters"] == counters
    assert_no_markup(out, name)
