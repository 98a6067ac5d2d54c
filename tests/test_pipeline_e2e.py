"""End-to-end runs of the corpus job (real DirectRunner, real Parquet on disk)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, dump, needs_shared, run_job
from tests.corpus_checks import (
    check_alias_contract,
    check_passage_contract,
    check_vocab_contract,
    manifest,
    passages,
    raw_counts,
    vocab,
)

pytestmark = pytest.mark.slow


def test_sample_counts_match_the_raw_xml(sample_corpus: Path, sample_dump: str):
    raw = raw_counts(sample_dump)
    counters = manifest(sample_corpus)["counters"]
    assert counters["pages_read"] == raw.pages
    assert counters["articles"] == len(raw.wikitext)
    assert counters["redirects"] == raw.redirects
    assert counters["disambiguation_pages"] == raw.disambiguation == 1
    assert counters["pages_by_namespace/0"] == raw.main_namespace


def test_sample_redirect_chains_and_loops(sample_corpus: Path, sample_dump: str):
    raw = raw_counts(sample_dump)
    counters = manifest(sample_corpus)["counters"]
    assert counters["redirect_loops"] == 2  # "Loop one" and "Loop two"
    aliases = {(r["alias"], r["entity"]): r for r in check_alias_contract(sample_corpus)}
    # A two-hop chain (Old X -> X (town) -> X#History) ends at the article X.
    old = next(t for t in raw.redirect_to if t.startswith("Old "))
    town = old.removeprefix("Old ")
    assert "redirect" in aliases[(old, town)]["sources"]
    assert "redirect" in aliases[(f"{town} (town)", town)]["sources"]
    assert not any(e == "Loop one" or e == "Loop two" for _, e in aliases)
    # The link [[Old X]] in "Sample Republic" is a hyperlink mention of X.
    rows = [r for split in ("train", "validation") for r in passages(sample_corpus, split)
            if r["title"] == "Sample Republic"]
    mentions = [m for r in rows for m in r["mentions"] if m["source"] == "hyperlink"]
    assert any(m["surface"] == old and m["entity"] == town for m in mentions)
    assert not any(m["surface"] == "a loop" for m in mentions)
    assert not any(m["surface"] == "below" for m in mentions)  # [[#Geography|below]] is a self-link


def test_sample_vocab_excludes_disambiguation_and_orders_by_count(sample_corpus: Path):
    rows = check_vocab_contract(sample_corpus)
    names = {r["entity"] for r in rows}
    assert not any(n.endswith("(disambiguation)") for n in names)
    assert len(rows) > 200


def test_sample_passage_contract(sample_corpus: Path):
    totals = check_passage_contract(sample_corpus)
    assert totals["passages/train"] > 300
    assert totals["passages/validation"] > 0
    assert totals["mentions/hyperlink"] > 1000
    assert totals["mentions/same_page_alias"] > 0 and totals["mentions/title_alias"] > 0


def test_manifest_is_complete_and_checksums_match(sample_corpus: Path):
    from pipelines.validate import validate_output

    m = validate_output(str(sample_corpus))
    kinds = {f["kind"] for f in m["files"]}
    assert kinds == {"passages", "alias_table", "entity_vocab", "entity_descriptions", "dead_letters", "tokenizer"}
    shards = sorted(f["path"] for f in m["files"] if f["kind"] == "passages")
    n = m["job"]["read_ranges"]  # the two-pass job writes one file per read range and split
    assert n == 1 and shards == [f"passages/{s}-{i:05d}-of-{n:05d}.parquet" for s in ("train", "validation")
                                 for i in range(n)]
    assert m["config"]["window"] == 128 and m["config"]["overlap"] == 10
    stats = json.loads((sample_corpus / "stats.json").read_text())
    assert stats["counters"] == m["counters"]
    # A damaged shard is caught by its checksum, naming the file.
    import shutil

    from pipelines.validate import InvalidOutputError

    broken = sample_corpus.parent / "broken_copy"
    shutil.copytree(sample_corpus, broken)
    victim = broken / shards[0]
    victim.write_bytes(victim.read_bytes()[:-7])
    with pytest.raises(InvalidOutputError, match=shards[0].split("/")[-1]):
        validate_output(str(broken))


@needs_shared
def test_enwiki206_counts_and_contract(enwiki206_corpus: Path):
    raw = raw_counts(dump("enwiki-2016-206pages-articles1.xml.bz2"))
    counters = manifest(enwiki206_corpus)["counters"]
    assert counters["pages_read"] == raw.pages == 206
    assert counters["redirects"] == raw.redirects
    assert counters["articles"] + counters["disambiguation_pages"] == raw.main_namespace - raw.redirects
    totals = check_passage_contract(enwiki206_corpus)
    check_vocab_contract(enwiki206_corpus)
    check_alias_contract(enwiki206_corpus)
    assert totals["passages/train"] > 1000
    # Every redirect of the excerpt that points at an article of the excerpt resolves to it.
    resolved = counters.get("redirects_resolved/article", 0)
    expected = sum(1 for src, dst in raw.redirect_to.items() if raw.titles.get(dst.split("#")[0]) == "article")
    assert resolved == expected


def test_missing_input_is_a_one_line_error(tmp_path: Path):
    proc = run_job(str(tmp_path / "nope.xml.bz2"), tmp_path / "out", check=False)
    assert proc.returncode == 2
    assert "error" in proc.stderr and "nope.xml.bz2" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_not_a_dump_is_a_one_line_error(tmp_path: Path):
    bogus = tmp_path / "data.xml"
    bogus.write_text('{"not": "xml"}\n' * 100)
    proc = run_job(str(bogus), tmp_path / "out", check=False)
    assert proc.returncode == 2
    assert "data.xml" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_beam_cli_runs_the_file_with_runner_alias(tmp_path: Path, sample_dump: str):
    out = tmp_path / "cli_out"
    beam = Path(sys.executable).parent / "beam"
    proc = subprocess.run(
        [str(beam), "run", "pipelines/wiki_mentions.py", "--input", sample_dump, "--output", str(out),
         "--runner=Direct", "--entity_vocab_size", "50"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "passages/train" in proc.stdout
    assert len(vocab(out)) == 53  # 3 reserved + the 50 most linked


def test_sample_entity_descriptions_cover_vocabulary_articles(sample_corpus: Path):
    import pyarrow.parquet as pq

    ids = {r["entity"]: r["entity_id"] for r in vocab(sample_corpus)}
    rows = [r for f in sorted((sample_corpus / "entity_descriptions").glob("*.parquet"))
            for r in pq.read_table(f).to_pylist()]
    assert len(rows) == len(ids) - 3  # every vocabulary entity has an article in the sample
    for r in rows:
        assert ids[r["entity"]] == r["entity_id"]
        # The lead paragraph of the entity's own article: the sample's leads open with the bold title.
        assert r["description"].startswith(r["entity"].split(" (")[0]), r
        assert "'''" not in r["description"] and "[[" not in r["description"], r
    assert all(r["description"].endswith(".") for r in rows)


def test_label_coverage_report_is_a_png(sample_corpus: Path, tmp_path: Path):
    from pipelines.report import coverage, plot

    cov = coverage(str(sample_corpus))
    assert cov["tokens"] > 0 and cov["covered"]["hyperlink"] > 0
    png = plot(str(sample_corpus), str(tmp_path / "cov.png"))
    assert Path(png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
