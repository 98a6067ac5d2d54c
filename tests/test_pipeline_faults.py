"""Faults and bad input through the whole job: every bad unit is counted and
dead-lettered, the good ones go through, and a killed run leaves nothing
that looks finished."""
from __future__ import annotations

import bz2
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipelines.output_guard import RUN_RECORD
from tests.conftest import REPO, run_job, run_job_here
from tests.corpus_checks import check_passage_contract, manifest

pytestmark = pytest.mark.slow

HEAD = ('<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/" version="0.10" xml:lang="en">\n'
        "<siteinfo><sitename>Wikipedia</sitename><dbname>enwiki</dbname><base>https://en.wikipedia.org/wiki/Main_Page</base>"
        "<generator>MediaWiki 1.41</generator><case>first-letter</case><namespaces>"
        '<namespace key="0" case="first-letter" /><namespace key="10" case="first-letter">Template</namespace>'
        '<namespace key="14" case="first-letter">Category</namespace></namespaces></siteinfo>\n')


def page(page_id: int, title: str, text: str) -> str:
    from xml.sax.saxutils import escape

    return (f"<page><title>{escape(title)}</title><ns>0</ns><id>{page_id}</id><revision><id>{page_id}0</id>"
            f'<text xml:space="preserve">{escape(text)}</text></revision></page>\n')


GOOD = ("'''Alpha''' is a town near [[Beta]]. Alpha has a [[Gamma|big river]]. "
        "People in Alpha like Beta and the big river. ") * 20


def bad_dump() -> str:
    return HEAD + "".join([
        page(1, "Alpha", GOOD),
        page(2, "Beta", "'''Beta''' is a village. It is close to [[Alpha]]. " * 20),
        page(3, "Gamma", "'''Gamma''' is a river through [[Alpha]] and [[Beta]]. " * 20),
        page(4, "Nested", "{{a|" * 5000 + "x" + "}}" * 5000 + " Nested text with [[Alpha]]."),  # nesting guard
        "<page><title>Broken</title><ns>0</ns><id>6</id><revision><text>unclosed <b></text></revision></page>\n",
        page(7, "Empty", ""),
        page(8, "Odd links", "Links with [[Foo<bar]], [[{{x}}]], [[a|b|c]] and [[Alpha]] and [[Beta#History|here]]. " * 5),
        page(9, "Loopy", "[[" * 3000 + "Alpha is here." + "]]" * 3000),  # unbalanced link nesting
        page(5, "Huge", "A [[Beta]] link. " * 120_000),  # > --max_page_mb 1
        # bz2 loses the whole last block (up to 900 kB) when cut: this filler is what gets lost.
        page(10, "Filler", "Filler text about [[Alpha]]. " * 60_000),
    ])


def _dead(out: Path) -> list[dict]:
    return pq.read_table(out / "dead_letters" / "dead_letters.parquet").to_pylist()


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16"])
def test_bad_pages_are_counted_dead_lettered_and_do_not_sink_the_job(tmp_path: Path, encoding: str):
    path = tmp_path / f"bad-{encoding}.xml.bz2"
    data = bad_dump().encode(encoding)  # Python's utf-16 codec writes a byte-order mark
    # Cut the compressed file short: the last page (and the closing tag) are lost.
    compressed = bz2.compress(data)
    path.write_bytes(compressed[: len(compressed) - 40])
    out = tmp_path / "out"
    started = time.monotonic()
    proc = run_job(str(path), out, "--max_page_mb", "1", "--keep_red_links", "true")
    assert time.monotonic() - started < 300, "no page may make the job hang"
    counters = manifest(out)["counters"]
    reasons = {(d["reason"], d["page_id"]) for d in _dead(out)}
    assert ("page_too_large", 5) in reasons
    assert ("bad_xml", 6) in reasons
    assert ("empty_page", 7) in reasons
    assert any(r in {"truncated_compressed", "truncated_xml"} for r, _ in reasons)
    assert sum(v for k, v in counters.items() if k.startswith("dead_letters/")) == len(_dead(out))
    # The good pages, the nested one (templates dropped) and the odd links page are articles.
    assert counters["articles"] >= 4
    totals = check_passage_contract(out)
    assert totals["mentions/hyperlink"] > 0
    assert "dead letters" in proc.stdout


def _mtime(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except FileNotFoundError:  # removed between listing and stat
        return None


def test_killed_run_then_rerun_equals_an_uninterrupted_run(tmp_path: Path, sample_dump: str, sample_corpus: Path):
    """Kill a run part-way, run again into the same folder: the result is byte-identical to an
    uninterrupted run, and an earlier finished run's files with another layout are gone (pass-2 units of 2
    articles: more passages files), as are the job's working files (lookup store, progress)."""
    out = tmp_path / "out"
    run_job_here(sample_dump, out, "--cache_chunk_articles", "2",
                 "--validation_fraction", "0.1")  # an older run, of another config
    assert (out / "manifest.json").exists()
    cmd = [sys.executable, "-m", "pipelines.wiki_mentions", "--input", sample_dump, "--output", str(out),
           "--validation_fraction", "0.1", "--overwrite", "true"]  # another config: --overwrite
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    def written_by_the_new_run() -> list[Path]:
        """Files the new run wrote that are still there (an older file it removed is not one, nor is a
        working file it removed since: the listing and the stat are not atomic)."""
        return [p for p in out.rglob("*") if p.is_file() and _mtime(p) not in (None, before.get(p))
                and p.name != RUN_RECORD]

    # Kill it part-way: once it has written something of its own (files have landed), while it still runs.
    # What was seen is kept: a working file seen now may be gone (renamed, removed) by a second look.
    deadline = time.monotonic() + 300
    written: list[Path] = []
    while time.monotonic() < deadline and proc.poll() is None and not (written := written_by_the_new_run()):
        time.sleep(0.02)
    assert proc.poll() is None, "the run finished before it could be killed part-way"
    assert written, "the run wrote nothing before the kill"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (out / "manifest.json").exists(), "a killed run must not look finished"
    run_job(sample_dump, out, "--validation_fraction", "0.1")  # the same config: a rerun
    rerun, reference = manifest(out), manifest(sample_corpus)
    assert {f["path"]: f["sha256"] for f in rerun["files"]} == {f["path"]: f["sha256"] for f in reference["files"]}
    on_disk = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert on_disk == sorted([f["path"] for f in rerun["files"]] + ["manifest.json", "stats.json", "README.md", RUN_RECORD])
